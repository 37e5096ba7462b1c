/* A stand-in libibverbs.so.1 for tests: the exported verbs the RDMA probes attach to,
 * with rdma-core's real signatures and structs (compiled against the installed
 * <infiniband/verbs.h>), doing what the real ones do to the objects the probes read:
 * create_qp returns a QP with its number, type, state and context; ibv_reg_mr tail-calls
 * ibv_reg_mr_iova2 as rdma-core 30+ does. No hardware is touched. */
#include <stdlib.h>
#include <string.h>
#include <infiniband/verbs.h>

#undef ibv_reg_mr /* verbs.h makes it a macro over the exported function */

static uint32_t next_qpn = 0x1a2b;

struct ibv_qp *ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *attr)
{
	struct ibv_qp *qp = calloc(1, sizeof(*qp));
	if (!qp)
		return NULL;
	qp->context = pd->context;
	qp->pd = pd;
	qp->qp_num = next_qpn++;
	qp->qp_type = attr->qp_type;
	qp->state = IBV_QPS_RESET;
	return qp;
}

int ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int attr_mask)
{
	if ((attr_mask & IBV_QP_STATE) && attr->qp_state == IBV_QPS_SQD)
		return 22; /* EINVAL: the tests' failing call, which must not count */
	if (attr_mask & IBV_QP_STATE)
		qp->state = attr->qp_state;
	return 0;
}

int ibv_destroy_qp(struct ibv_qp *qp)
{
	free(qp);
	return 0;
}

struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova,
				unsigned int access)
{
	struct ibv_mr *mr = calloc(1, sizeof(*mr));
	if (!mr)
		return NULL;
	mr->context = pd->context;
	mr->pd = pd;
	mr->addr = addr;
	mr->length = length;
	mr->lkey = mr->rkey = 0x42;
	(void)iova;
	(void)access;
	return mr;
}

struct ibv_mr *ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t length, int access)
{
	return ibv_reg_mr_iova2(pd, addr, length, (uintptr_t)addr, access);
}

int ibv_dereg_mr(struct ibv_mr *mr)
{
	free(mr);
	return 0;
}
