/* A TLS client in C for the tests: built against OpenSSL statically (with or without
 * symbols), it proves the agent finds OpenSSL inside an executable, or says it cannot.
 *
 *   tls_client PORT PATH CAFILE
 *
 * Connects to 127.0.0.1:PORT, waits for a line on stdin (the agent attaches when it sees
 * the exec; the test sends the line once the agent said so, which no fixed wait could
 * promise on a loaded machine), then GETs PATH over TLS, verifying the server against
 * CAFILE, and prints the status line. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static int fail(const char *what)
{
	fprintf(stderr, "tls_client: %s\n", what);
	ERR_print_errors_fp(stderr);
	return 1;
}

int main(int argc, char **argv)
{
	if (argc != 4)
		return fail("usage: tls_client PORT PATH CAFILE");
	int port = atoi(argv[1]);
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons(port)};
	inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
	if (fd < 0 || connect(fd, (struct sockaddr *)&addr, sizeof(addr)) != 0)
		return fail("connect");
	char go[16];
	if (!fgets(go, sizeof(go), stdin))
		return fail("stdin closed before the go line");

	SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
	if (!ctx || SSL_CTX_load_verify_locations(ctx, argv[3], NULL) != 1)
		return fail("CA file");
	SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
	SSL *ssl = SSL_new(ctx);
	SSL_set_fd(ssl, fd);
	SSL_set_tlsext_host_name(ssl, "localhost");
	if (SSL_connect(ssl) != 1)
		return fail("handshake");
	char request[512];
	int n = snprintf(request, sizeof(request),
			 "GET %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nUser-Agent: tls_client/1\r\n"
			 "Connection: close\r\n\r\n", argv[2], port);
	if (SSL_write(ssl, request, n) != n)
		return fail("write");
	char buf[4096];
	int got, total = 0;
	while ((got = SSL_read(ssl, buf + total, sizeof(buf) - 1 - total)) > 0 && total < 4000)
		total += got;
	buf[total] = 0;
	char *eol = strstr(buf, "\r\n");
	if (eol)
		*eol = 0;
	printf("%s\n", buf);
	SSL_shutdown(ssl);
	SSL_free(ssl);
	SSL_CTX_free(ctx);
	close(fd);
	return 0;
}
