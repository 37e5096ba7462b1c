// SPDX-License-Identifier: GPL-2.0
/* RDMA from user space, where kernel-bypass hides it from socket hooks:
 *  - uprobes on libibverbs's exported verbs (ibv_create_qp, ibv_modify_qp, ibv_destroy_qp,
 *    ibv_reg_mr_iova2 / ibv_reg_mr, ibv_reg_dmabuf_mr, ibv_dereg_mr): one event per call,
 *    sent when it returns (the return value says whether it took effect);
 *  - uprobes on NCCL's collectives and point-to-point calls: counted here, per process,
 *    operation and datatype (too frequent to send one by one).
 * Structs are read at the fixed offsets of rdma-core's stable ABI (include/rdma.h). */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "rdma.h"

char LICENSE[] SEC("license") = "GPL";

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 256 * 1024);
} rdma_events SEC(".maps");

/* a verbs call between its entry and its return, by thread */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u64);
	__type(value, struct rdma_event);
} rdma_pending SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, struct nccl_key);
	__type(value, struct nccl_totals);
} nccl_calls SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, RDMA_CNT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} rdma_counters SEC(".maps");

/* one zeroed event per CPU: an rdma_event is too large to build twice on the stack */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct rdma_event);
} rdma_zero SEC(".maps");

static __always_inline void count(__u32 idx)
{
	__u64 *n = bpf_map_lookup_elem(&rdma_counters, &idx);
	if (n)
		__sync_fetch_and_add(n, 1);
}

static __always_inline __u64 read_ptr(const void *base, __u32 off)
{
	__u64 v = 0;
	if (base)
		bpf_probe_read_user(&v, sizeof(v), (const char *)base + off);
	return v;
}

static __always_inline __u32 read_u32(const void *base, __u32 off)
{
	__u32 v = 0;
	if (base)
		bpf_probe_read_user(&v, sizeof(v), (const char *)base + off);
	return v;
}

/* the device name through an ibv_context: context->device->name */
static __always_inline void read_device(struct rdma_event *ev, const void *context)
{
	const void *device = (const void *)read_ptr(context, IBV_CONTEXT_DEVICE_OFF);
	if (device)
		bpf_probe_read_user_str(ev->device, sizeof(ev->device),
					(const char *)device + IBV_DEVICE_NAME_OFF);
}

static __always_inline void read_qp(struct rdma_event *ev, const void *qp)
{
	ev->handle = (__u64)qp;
	ev->qp_num = read_u32(qp, IBV_QP_QP_NUM_OFF);
	ev->qp_type = read_u32(qp, IBV_QP_QP_TYPE_OFF);
	read_device(ev, (const void *)read_ptr(qp, IBV_QP_CONTEXT_OFF));
}

/* A new event for this thread's call, kept until its return; NULL when none can be kept. */
static __always_inline struct rdma_event *begin(__u32 kind)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 zero = 0;
	struct rdma_event *blank = bpf_map_lookup_elem(&rdma_zero, &zero);
	if (!blank)
		return NULL;
	if (bpf_map_update_elem(&rdma_pending, &id, blank, BPF_ANY) != 0) {
		count(RDMA_CNT_PENDING_FULL);
		return NULL;
	}
	struct rdma_event *ev = bpf_map_lookup_elem(&rdma_pending, &id);
	if (!ev)
		return NULL;
	ev->kind = kind;
	ev->pid = id >> 32;
	ev->tid = (__u32)id;
	return ev;
}

/* The call returned: stamp it and send it. `ptr` calls return an object (NULL = failed). */
static __always_inline int finish(long ret, bool ptr)
{
	__u64 id = bpf_get_current_pid_tgid();
	struct rdma_event *ev = bpf_map_lookup_elem(&rdma_pending, &id);
	if (!ev)
		return 0;
	if (ptr) {
		ev->ret = ret ? 0 : -1;
		if (ret && ev->kind == RDMA_QP_CREATE) {
			read_qp(ev, (const void *)ret);
			ev->qp_state = read_u32((const void *)ret, IBV_QP_STATE_OFF);
		} else if (ret) {
			ev->handle = (__u64)ret;
		}
	} else {
		ev->ret = (__s32)ret;
	}
	ev->ts_ns = bpf_ktime_get_ns();
	bpf_get_current_comm(ev->comm, sizeof(ev->comm));
	if (bpf_ringbuf_output(&rdma_events, ev, sizeof(*ev), BPF_RB_NO_WAKEUP) != 0)
		count(RDMA_CNT_RING_DROPS);
	bpf_map_delete_elem(&rdma_pending, &id);
	return 0;
}

/* struct ibv_qp *ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *attr) */
SEC("uprobe")
int BPF_KPROBE(ibv_create_qp_enter, void *pd)
{
	begin(RDMA_QP_CREATE);
	return 0;
}

SEC("uretprobe")
int BPF_KRETPROBE(ibv_create_qp_exit, void *qp)
{
	return finish((long)qp, true);
}

/* int ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int attr_mask):
 * the transitions to RTR carry the remote QPN and, over RoCE or a routed fabric, the
 * remote GID: the QP pair. */
SEC("uprobe")
int BPF_KPROBE(ibv_modify_qp_enter, void *qp, void *attr, int attr_mask)
{
	struct rdma_event *ev = begin(RDMA_QP_MODIFY);
	if (!ev)
		return 0;
	read_qp(ev, qp);
	__u32 mask = (__u32)attr_mask;
	ev->attr_mask = mask;
	if (!attr)
		return 0;
	if (mask & IBV_QP_STATE_BIT)
		ev->qp_state = read_u32(attr, IBV_QP_ATTR_QP_STATE_OFF);
	if (mask & IBV_QP_DEST_QPN_BIT)
		ev->dest_qp_num = read_u32(attr, IBV_QP_ATTR_DEST_QP_NUM_OFF);
	if (mask & IBV_QP_PATH_MTU_BIT)
		ev->path_mtu = read_u32(attr, IBV_QP_ATTR_PATH_MTU_OFF);
	if (mask & IBV_QP_PORT_BIT)
		bpf_probe_read_user(&ev->port_num, 1, (const char *)attr + IBV_QP_ATTR_PORT_NUM_OFF);
	if (mask & IBV_QP_AV_BIT) {
		const char *ah = (const char *)attr + IBV_QP_ATTR_AH_ATTR_OFF;
		bpf_probe_read_user(&ev->is_global, 1, ah + IBV_AH_ATTR_IS_GLOBAL_OFF);
		bpf_probe_read_user(&ev->dlid, 2, ah + IBV_AH_ATTR_DLID_OFF);
		if (ev->is_global) {
			bpf_probe_read_user(ev->dgid, sizeof(ev->dgid), ah + IBV_AH_ATTR_DGID_OFF);
			bpf_probe_read_user(&ev->sgid_index, 1, ah + IBV_AH_ATTR_SGID_INDEX_OFF);
		}
	}
	return 0;
}

SEC("uretprobe")
int BPF_KRETPROBE(ibv_int_exit, int ret)
{
	return finish(ret, false);
}

/* int ibv_destroy_qp(struct ibv_qp *qp) */
SEC("uprobe")
int BPF_KPROBE(ibv_destroy_qp_enter, void *qp)
{
	struct rdma_event *ev = begin(RDMA_QP_DESTROY);
	if (ev)
		read_qp(ev, qp);
	return 0;
}

/* struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t length, ...),
 * and ibv_reg_mr / ibv_reg_dmabuf_mr, whose length is also the third argument */
SEC("uprobe")
int BPF_KPROBE(ibv_reg_mr_enter, void *pd, void *addr, __u64 length)
{
	struct rdma_event *ev = begin(RDMA_MR_REG);
	if (!ev)
		return 0;
	ev->length = length;
	read_device(ev, (const void *)read_ptr(pd, IBV_PD_CONTEXT_OFF));
	return 0;
}

SEC("uretprobe")
int BPF_KRETPROBE(ibv_reg_mr_exit, void *mr)
{
	return finish((long)mr, true);
}

/* int ibv_dereg_mr(struct ibv_mr *mr) */
SEC("uprobe")
int BPF_KPROBE(ibv_dereg_mr_enter, void *mr)
{
	struct rdma_event *ev = begin(RDMA_MR_DEREG);
	if (!ev)
		return 0;
	ev->handle = (__u64)mr;
	ev->length = read_ptr(mr, IBV_MR_LENGTH_OFF);
	read_device(ev, (const void *)read_ptr(mr, IBV_MR_CONTEXT_OFF));
	return 0;
}

static __always_inline int nccl_add(__u32 op, __u64 count_arg, int datatype)
{
	struct nccl_key key = {
		.pid = bpf_get_current_pid_tgid() >> 32, .op = op, .datatype = datatype,
	};
	struct nccl_totals *t = bpf_map_lookup_elem(&nccl_calls, &key);
	if (!t) {
		struct nccl_totals zero = {};
		/* NOEXIST: another thread of the process may have added it meanwhile */
		if (bpf_map_update_elem(&nccl_calls, &key, &zero, BPF_NOEXIST) != 0 &&
		    !bpf_map_lookup_elem(&nccl_calls, &key)) {
			count(RDMA_CNT_NCCL_FULL);
			return 0;
		}
		t = bpf_map_lookup_elem(&nccl_calls, &key);
		if (!t)
			return 0;
	}
	__sync_fetch_and_add(&t->calls, 1);
	__sync_fetch_and_add(&t->elements, count_arg);
	return 0;
}

/* ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count,
 *     ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream);
 * AllGather (sendcount), ReduceScatter (recvcount), Broadcast and Reduce have the count
 * and the datatype at the same places. */
#define COLLECTIVE(name, op)                                                            \
	SEC("uprobe")                                                                   \
	int BPF_KPROBE(name, const void *sendbuff, void *recvbuff, __u64 count, int dt) \
	{                                                                               \
		return nccl_add(op, count, dt);                                         \
	}

COLLECTIVE(nccl_all_reduce, NCCL_OP_ALL_REDUCE)
COLLECTIVE(nccl_all_gather, NCCL_OP_ALL_GATHER)
COLLECTIVE(nccl_reduce_scatter, NCCL_OP_REDUCE_SCATTER)
COLLECTIVE(nccl_broadcast, NCCL_OP_BROADCAST)
COLLECTIVE(nccl_reduce, NCCL_OP_REDUCE)

/* ncclResult_t ncclSend(const void *sendbuff, size_t count, ncclDataType_t datatype,
 *     int peer, ncclComm_t comm, cudaStream_t stream); ncclRecv likewise */
SEC("uprobe")
int BPF_KPROBE(nccl_send, const void *sendbuff, __u64 count, int dt)
{
	return nccl_add(NCCL_OP_SEND, count, dt);
}

SEC("uprobe")
int BPF_KPROBE(nccl_recv, void *recvbuff, __u64 count, int dt)
{
	return nccl_add(NCCL_OP_RECV, count, dt);
}
