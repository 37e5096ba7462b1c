/* SPDX-License-Identifier: GPL-2.0 */
/* What bpf/rdma.bpf.c shares with user space (otel_ebpf/kernel/rdma_abi.py mirrors it;
 * tests/unit/test_rdma_abi.py compiles this header and compares every size and offset),
 * and the offsets of the libibverbs structs the probes read. */
#ifndef OTEL_EBPF_RDMA_H
#define OTEL_EBPF_RDMA_H

/* Offsets inside rdma-core's public structs (infiniband/verbs.h, LP64; stable ABI since
 * IBVERBS_1.1). tests/unit/test_rdma_abi.py checks each against offsetof() in the
 * installed verbs.h, so a wrong number here fails a test, not a production agent. */
#define IBV_QP_CONTEXT_OFF 0	  /* struct ibv_qp.context */
#define IBV_QP_QP_NUM_OFF 52	  /* struct ibv_qp.qp_num */
#define IBV_QP_STATE_OFF 56	  /* struct ibv_qp.state */
#define IBV_QP_QP_TYPE_OFF 60	  /* struct ibv_qp.qp_type */
#define IBV_CONTEXT_DEVICE_OFF 0  /* struct ibv_context.device */
#define IBV_DEVICE_NAME_OFF 24	  /* struct ibv_device.name */
#define IBV_PD_CONTEXT_OFF 0	  /* struct ibv_pd.context */
#define IBV_MR_CONTEXT_OFF 0	  /* struct ibv_mr.context */
#define IBV_MR_LENGTH_OFF 24	  /* struct ibv_mr.length */
#define IBV_QP_ATTR_QP_STATE_OFF 0     /* struct ibv_qp_attr.qp_state */
#define IBV_QP_ATTR_PATH_MTU_OFF 8     /* struct ibv_qp_attr.path_mtu */
#define IBV_QP_ATTR_DEST_QP_NUM_OFF 28 /* struct ibv_qp_attr.dest_qp_num */
#define IBV_QP_ATTR_AH_ATTR_OFF 56     /* struct ibv_qp_attr.ah_attr */
#define IBV_QP_ATTR_PORT_NUM_OFF 129   /* struct ibv_qp_attr.port_num */
#define IBV_AH_ATTR_DGID_OFF 0	       /* struct ibv_ah_attr.grh.dgid */
#define IBV_AH_ATTR_SGID_INDEX_OFF 20  /* struct ibv_ah_attr.grh.sgid_index */
#define IBV_AH_ATTR_DLID_OFF 24	       /* struct ibv_ah_attr.dlid */
#define IBV_AH_ATTR_IS_GLOBAL_OFF 29   /* struct ibv_ah_attr.is_global */
/* enum ibv_qp_attr_mask bits the probes look at */
#define IBV_QP_STATE_BIT (1u << 0)
#define IBV_QP_PORT_BIT (1u << 5)
#define IBV_QP_AV_BIT (1u << 7)
#define IBV_QP_PATH_MTU_BIT (1u << 8)
#define IBV_QP_DEST_QPN_BIT (1u << 20)

#define RDMA_DEVICE_LEN 64 /* IBV_SYSFS_NAME_MAX */
#define RDMA_COMM_LEN 16

enum rdma_event_kind {
	RDMA_QP_CREATE = 1,
	RDMA_QP_MODIFY = 2,
	RDMA_QP_DESTROY = 3,
	RDMA_MR_REG = 4,
	RDMA_MR_DEREG = 5,
};

/* One verbs call, sent when it returns. `handle` is the QP's or MR's address in the
 * process (what later calls name it by); fields a call does not set stay zero. */
struct rdma_event {
	__u64 ts_ns;
	__u64 handle;
	__u64 length;	    /* MR bytes (reg: asked for; dereg: the MR's length) */
	__u32 pid;
	__u32 tid;
	__s32 ret;	    /* int verbs: what they returned; pointer verbs: 0, or -1 for NULL */
	__u32 kind;	    /* enum rdma_event_kind */
	__u32 qp_num;
	__u32 qp_type;	    /* enum ibv_qp_type */
	__u32 attr_mask;    /* ibv_modify_qp's mask */
	__u32 qp_state;	    /* create: the QP's state; modify: attr.qp_state when masked */
	__u32 dest_qp_num;  /* modify with IBV_QP_DEST_QPN */
	__u32 path_mtu;	    /* modify with IBV_QP_PATH_MTU (enum ibv_mtu) */
	__u8 port_num;	    /* modify with IBV_QP_PORT */
	__u8 is_global;	    /* modify with IBV_QP_AV: dgid is valid */
	__u8 sgid_index;
	__u8 _pad0;
	__u16 dlid;	    /* modify with IBV_QP_AV (InfiniBand destination LID) */
	__u16 _pad1;
	__u8 dgid[16];	    /* modify with IBV_QP_AV and is_global: the remote GID */
	char comm[RDMA_COMM_LEN];
	char device[RDMA_DEVICE_LEN]; /* the verbs device (mlx5_0), as sysfs names it */
};

/* NCCL calls are counted in the kernel, per process, operation and datatype: a training
 * step makes hundreds of them, and user space needs only the sums. */
enum nccl_op {
	NCCL_OP_ALL_REDUCE = 0,
	NCCL_OP_ALL_GATHER = 1,
	NCCL_OP_REDUCE_SCATTER = 2,
	NCCL_OP_BROADCAST = 3,
	NCCL_OP_REDUCE = 4,
	NCCL_OP_SEND = 5,
	NCCL_OP_RECV = 6,
};

struct nccl_key {
	__u32 pid;
	__u32 op;	/* enum nccl_op */
	__s32 datatype; /* ncclDataType_t */
	__u32 _pad;
};

struct nccl_totals {
	__u64 calls;
	__u64 elements; /* the count arguments summed; bytes = elements x the type's size */
};

/* rdma_counters (per-CPU array) indices */
enum rdma_counter {
	RDMA_CNT_RING_DROPS = 0,   /* events the ring buffer had no room for */
	RDMA_CNT_NCCL_FULL = 1,	   /* NCCL calls not counted: nccl_calls was full */
	RDMA_CNT_PENDING_FULL = 2, /* verbs calls lost: too many in flight at once */
	RDMA_CNT_MAX = 3,
};

#endif
