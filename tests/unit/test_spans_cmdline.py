"""redact_args: secrets in command lines replaced by value shape and by option name, while
paths, module names, hosts and numbers stay readable."""

from __future__ import annotations

import sys

import pytest

from otel_ebpf.spans.cmdline import inline_code, looks_random, redact_args

R = "REDACTED"

SECRETS = [
    # headers given to curl, quoted, glued, or split by an unquoted shell line
    (["curl", "-H", "Authorization: Bearer abc.def-123", "http://127.0.0.1:8000/x"],
     ["curl", "-H", f"Authorization: {R}", "http://127.0.0.1:8000/x"]),
    (["curl", "-H", "Cookie: sid=1; theme=dark", "-H", "X-Api-Key: k-77"],
     ["curl", "-H", f"Cookie: {R}", "-H", f"X-Api-Key: {R}"]),
    (["curl", "-HProxy-Authorization: Basic Ym9iOnB3", "--header=X-Auth-Token: t0k"],
     ["curl", f"-HProxy-Authorization: {R}", f"--header=X-Auth-Token: {R}"]),
    (["curl", "-H", "Authorization:", "Bearer", "tok", "http://h/"],
     ["curl", "-H", "Authorization:", R, R, "http://h/"]),
    (["wrk", "Bearer", "tok-1"], ["wrk", "Bearer", R]),
    (["app", "--auth-header", "x", "Bearer mytoken1"], ["app", "--auth-header", R, f"Bearer {R}"]),
    # options with secret-looking names (before the value or with =)
    (["vllm", "serve", "m", "--api-key", "k1", "--port", "8000"],
     ["vllm", "serve", "m", "--api-key", R, "--port", "8000"]),
    (["app", "--x-password=hunter2", "--hf-token=abc", "-token", "t", "--clientSecret", "s"],
     ["app", f"--x-password={R}", f"--hf-token={R}", "-token", R, "--clientSecret", R]),
    # programs whose secret options have plain names
    (["mysql", "-uroot", "-pHunter2", "-h", "db", "-P", "3306"],
     ["mysql", "-uroot", f"-p{R}", "-h", "db", "-P", "3306"]),
    (["mysqldump", "--password=pw", "db"], ["mysqldump", f"--password={R}", "db"]),
    (["curl", "-u", "bob:pw", "-ualice:pw2", "--user=a:b", "-b", "sid=1"],
     ["curl", "-u", R, f"-u{R}", f"--user={R}", "-b", R]),
    (["redis-cli", "-a", "pw", "-p", "6379"], ["redis-cli", "-a", R, "-p", "6379"]),
    (["sshpass", "-p", "pw", "ssh", "h"], ["sshpass", "-p", R, "ssh", "h"]),
    # URL credentials and secret query parameters inside a URL
    (["psql", "postgres://bob:hunter2@db/x"], ["psql", f"postgres://{R}@db/x"]),
    (["curl", "https://h/p?api_key=1&password=2&q=shoes"],
     ["curl", f"https://h/p?api_key={R}&password={R}&q=shoes"]),
    # variables and JSON keys
    (["env", "AWS_SECRET_ACCESS_KEY=abcd", "LOG_LEVEL=debug"],
     ["env", f"AWS_SECRET_ACCESS_KEY={R}", "LOG_LEVEL=debug"]),
    (["app", "--config", '{"api_key": "abc", "model": "m", "token": 12}'],
     ["app", "--config", f'{{"api_key": "{R}", "model": "m", "token": {R}}}']),
    # well-known key shapes, as bare arguments
    (["app", "sk-proj-Ab3dEfGh1jKlMn0pQrStUv", "sk-ant-api03-abcdefghijklmnop"], ["app", R, R]),
    (["app", "ghp_abcdefghijklmnopqrstuvwxyz0123", "github_pat_11ABCDEFG0123456789abcd"],
     ["app", R, R]),
    (["app", "xoxb-1234-5678-abcdefgh", "xoxp-99-aa-bbbbbbbbbb"], ["app", R, R]),
    (["app", "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJl"], ["app", R]),
    (["app", "AKIAIOSFODNN7EXAMPLE", "AIzaSyA-1234567890abcdefghijklmnopqrs"], ["app", R, R]),
    (["app", "hf_abcdefghijklmnopqrstuvwxyzABCDEF", "glpat-abcdefghij0123456789"], ["app", R, R]),
    (["app", "--key-data", "-----BEGIN RSA PRIVATE KEY-----\nMIIE\n-----END RSA PRIVATE KEY-----"],
     ["app", "--key-data", R]),
    # long random tokens nobody named
    (["app", "a8F3kLm9Qz2Xv7Rt1Bn4Wc6Yp0Hs5Dj"], ["app", R]),
    (["app", "Zm9vYmFyYmF6cXV4MTIzNDU2Nzg5MA=="], ["app", R]),
    (["app", "0123456789abcdef0123456789abcdef"], ["app", R]),
    (["app", "/tmp/a8F3kLm9Qz2Xv7Rt1Bn4Wc6Yp0Hs5Dj/x"], ["app", f"/tmp/{R}/x"]),
    # inline program text
    (["python3", "-c", "import os; KEY='x'", "--port", "1"], ["python3", "-c", R, "--port", "1"]),
    (["python3.11", "-u", "-cprint(1)"], ["python3.11", "-u", f"-c{R}"]),
    (["python3", "-X", "dev", "-W", "ignore", "-c", "code"],
     ["python3", "-X", "dev", "-W", "ignore", "-c", R]),
    (["bash", "-ec", "curl -H 'X: $T'"], ["bash", "-ec", R]),
    (["sh", "-o", "pipefail", "-c", "x", "arg0"], ["sh", "-o", "pipefail", "-c", R, "arg0"]),
    (["bash", "--rcfile", "/r", "-lc", "x"], ["bash", "--rcfile", "/r", "-lc", R]),
    (["python3", "--check-hash-based-pycs", "always", "-c", "x"],
     ["python3", "--check-hash-based-pycs", "always", "-c", R]),
    (["perl", "-e", "a", "-e", "b", "file"], ["perl", "-e", R, "-e", R, "file"]),
    (["perl", "-Ilib", "-lne", "print", "file"], ["perl", "-Ilib", "-lne", R, "file"]),
    (["ruby", "-e", "puts 1"], ["ruby", "-e", R]),
    (["node", "-r", "ts-node/register", "-e", "x"], ["node", "-r", "ts-node/register", "-e", R]),
    (["node", "--eval=x"], ["node", f"--eval={R}"]),
    (["php", "-d", "x=1", "-r", "echo 1;"], ["php", "-d", "x=1", "-r", R]),
]


@pytest.mark.parametrize(("args", "expected"), SECRETS)
def test_secrets_are_redacted(args, expected):
    assert redact_args(args) == expected


KEPT = [
    ["/usr/bin/python3.11", "/srv/.venv/lib/python3.11/site-packages/uvicorn/__main__.py",
     "tests.integration.peers.http_app:app", "--host", "127.0.0.1", "--port", "8000"],
    ["python3", "-m", "vllm.entrypoints.openai.api_server", "--model",
     "meta-llama/Llama-3.1-8B-Instruct", "--tokenizer", "gpt2", "--max-tokens", "100"],
    ["python3", "-m", "pytest", "-c", "x.ini"],  # -c after -m belongs to the module
    ["python3", "app.py", "-c", "conf.yaml"],  # ... and after a script, to the script
    ["node", "server.js", "-e", "prod"],
    ["mysql", "-p", "mydb"],  # -p alone prompts; the next argument is a database
    ["ssh", "-p", "2222", "db.internal.example.com"],
    ["wget", "--user", "bob", "https://example.com/file.tar.gz"],  # a user name, not a secret
    ["java", "-Xmx4g", "-cp", "/opt/app/lib/*", "com.example.BertForSequenceClassification2",
     "checkpoint_epoch_10_step_2000_final", "x86_64-linux-gnu-gcc-12"],
    ["app", "123e4567-e89b-12d3-a456-426614174000", "2026-12-03T08:43:05Z",
     "1234567890123456789012", "deadbeefcafe", "--keyboard", "us", "--ssl-keyfile", "/k.pem"],
    ["nginx", "-g", "daemon off;", "-c", "/etc/nginx/nginx.conf"],
    ["docker", "pull", "nginx@sha256:" + "4b825dc642cb6eb9a060e54bf8d69288" * 2],  # a digest
    ["curl", "-H", "Content-Type: application/json", "-d", '{"model": "m", "n": 1}',
     "http://localhost:11434/api/chat?stream=false"],
    ["app", "https://user.example.com:8443/a/b", "redis://cache:6379/0", "LOG_LEVEL=debug"],
]


@pytest.mark.parametrize("args", KEPT)
def test_ordinary_arguments_stay(args):
    assert redact_args(args) == args


def test_real_paths_and_module_names_stay():
    """Every entry of sys.path and every stdlib module name, as an argument, unchanged."""
    args = ["python3", *sys.path, *sorted(sys.stdlib_module_names)]
    assert redact_args(args) == args


@pytest.mark.parametrize("token", [
    "Q2hJeE5vVGhpc0lzQVJhbmRvbQ",  # base64
    "9fj38dk2mx71pq0zt5nb4vc6",  # base36, 24 characters
    "K7Q2M9XW4T1B8N3R6Y0Z5V2J",  # upper case base36
    "4b825dc642cb6eb9a060e54bf8d69288fbee4904",  # 40 hex
])
def test_random_tokens_look_random(token):
    assert looks_random(token)


@pytest.mark.parametrize("word", [
    "site-packages", "__editable___otel_ebpf_0_1_0_finder", "mlx5dv_dr_action_create_flow",
    "X86DisassemblerDecoderCommon1", "0123456789012345678901234", "sha256", "abcdef0123456789",
])
def test_words_do_not(word):
    assert not looks_random(word)


def test_inline_code_only_for_interpreters():
    assert inline_code(["grep", "-c", "x"]) == {}
    assert inline_code(["busybox", "wget", "-c", "http://h/"]) == {}
    assert inline_code(["busybox", "sh", "-c", "x"]) == {3: R}
    assert inline_code(["/usr/bin/bash", "-c", "x"]) == {2: R}
    assert inline_code([]) == {}


@pytest.mark.parametrize(("arg", "expected"), [
    ("--env=API_KEY=xyz", f"--env=API_KEY={R}"),  # a pair inside a plain option's value
    ('X-Api-Key: "quoted"', f"X-Api-Key: {R}"),
    ("Authorization=Bearer abc", f"Authorization={R} {R}"),
    ("a=1&password=&b=2", "a=1&password=&b=2"),  # an empty value stays empty
    ("{'secret': 'x y', 'n': 1}", f"{{'secret': '{R}', 'n': 1}}"),
])
def test_pairs_inside_arguments(arg, expected):
    assert redact_args(["app", arg]) == ["app", expected]
