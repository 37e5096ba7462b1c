/* A program that uses verbs and NCCL as an RDMA application would, against the stand-in
 * libraries: it waits for a line on stdin (the agent attaches meanwhile), makes its
 * calls, prints "done", and exits when stdin closes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <infiniband/verbs.h>

typedef int ncclResult_t;
typedef struct ncclComm *ncclComm_t;
typedef struct CUstream_st *cudaStream_t;
ncclResult_t ncclAllReduce(const void *, void *, size_t, int, int, ncclComm_t, cudaStream_t);
ncclResult_t ncclAllGather(const void *, void *, size_t, int, ncclComm_t, cudaStream_t);
ncclResult_t ncclReduceScatter(const void *, void *, size_t, int, int, ncclComm_t,
			       cudaStream_t);
ncclResult_t ncclBroadcast(const void *, void *, size_t, int, int, ncclComm_t, cudaStream_t);
ncclResult_t ncclSend(const void *, size_t, int, int, ncclComm_t, cudaStream_t);
ncclResult_t ncclRecv(void *, size_t, int, int, ncclComm_t, cudaStream_t);

int main(void)
{
	char line[16];
	struct ibv_device device;
	struct ibv_context context;
	struct ibv_pd pd;
	memset(&device, 0, sizeof(device));
	memset(&context, 0, sizeof(context));
	memset(&pd, 0, sizeof(pd));
	strcpy(device.name, "mlx5_1");
	context.device = &device;
	pd.context = &context;

	printf("ready\n");
	fflush(stdout);
	if (!fgets(line, sizeof(line), stdin))
		return 1;

	struct ibv_qp_init_attr init = {.qp_type = IBV_QPT_RC};
	struct ibv_qp *qp = ibv_create_qp(&pd, &init);
	struct ibv_qp_attr attr;
	memset(&attr, 0, sizeof(attr));
	attr.qp_state = IBV_QPS_INIT;
	attr.port_num = 2;
	attr.pkey_index = 0;
	attr.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
	ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);

	memset(&attr, 0, sizeof(attr));
	attr.qp_state = IBV_QPS_RTR;
	attr.path_mtu = IBV_MTU_4096;
	attr.dest_qp_num = 0x3c4d;
	attr.rq_psn = 1;
	attr.ah_attr.is_global = 1;
	attr.ah_attr.port_num = 2;
	attr.ah_attr.grh.sgid_index = 3;
	attr.ah_attr.grh.hop_limit = 64;
	/* RoCE v2 GID of 10.0.0.2: ::ffff:10.0.0.2 */
	attr.ah_attr.grh.dgid.raw[10] = 0xff;
	attr.ah_attr.grh.dgid.raw[11] = 0xff;
	inet_pton(AF_INET, "10.0.0.2", &attr.ah_attr.grh.dgid.raw[12]);
	ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
				 IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);

	memset(&attr, 0, sizeof(attr));
	attr.qp_state = IBV_QPS_RTS;
	ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_SQ_PSN);
	attr.qp_state = IBV_QPS_SQD; /* refused by the library: must change nothing */
	ibv_modify_qp(qp, &attr, IBV_QP_STATE);

	struct ibv_qp *gone = ibv_create_qp(&pd, &init); /* created and destroyed */
	ibv_destroy_qp(gone);

	static char buf[1 << 20];
	struct ibv_mr *big = ibv_reg_mr(&pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	struct ibv_mr *small = ibv_reg_mr(&pd, buf, 4096, IBV_ACCESS_LOCAL_WRITE);
	ibv_dereg_mr(small);
	(void)big;

	for (int i = 0; i < 3; i++)
		ncclAllReduce(buf, buf, 1 << 20, 7 /* float32 */, 0, NULL, NULL);
	ncclAllGather(buf, buf, 256, 9 /* bfloat16 */, NULL, NULL);
	ncclAllGather(buf, buf, 256, 9, NULL, NULL);
	ncclReduceScatter(buf, buf, 1000, 6 /* float16 */, 0, NULL, NULL);
	ncclBroadcast(buf, buf, 10, 4 /* int64 */, 0, NULL, NULL);
	ncclSend(buf, 100, 1 /* uint8 */, 1, NULL, NULL);
	ncclRecv(buf, 200, 8 /* float64 */, 1, NULL, NULL);

	printf("done %u\n", qp->qp_num);
	fflush(stdout);
	while (fgets(line, sizeof(line), stdin))
		;
	return 0;
}
