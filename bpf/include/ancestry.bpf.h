/* SPDX-License-Identifier: GPL-2.0 */
/* Target selection by process id, shared by the capture and profiling programs: a process
 * is selected when it, or one of its ancestors a few generations up, is a key of the given
 * pid map, so that workers forked by a selected server (gunicorn, uvicorn --workers) are
 * selected too. */
#ifndef OTEL_EBPF_ANCESTRY_BPF_H
#define OTEL_EBPF_ANCESTRY_BPF_H

#define ANCESTRY_DEPTH 4

static __always_inline bool process_or_ancestor_in(void *pids, struct task_struct *task)
{
#pragma unroll
	for (int i = 0; i < ANCESTRY_DEPTH; i++) {
		__u32 tgid = BPF_CORE_READ(task, tgid);
		if (bpf_map_lookup_elem(pids, &tgid))
			return true;
		task = BPF_CORE_READ(task, real_parent);
		if (!task)
			break;
	}
	return false;
}

#endif
