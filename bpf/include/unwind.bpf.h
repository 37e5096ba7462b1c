/* SPDX-License-Identifier: GPL-2.0 */
/* The user stack of the current thread walked with unwind tables (docs/decisions.md,
 * "Native stacks without frame pointers: unwind tables walked in BPF" and "GPU allocation
 * stacks with the unwind tables"): CPU samples (profile.bpf.c) and GPU allocations
 * (cuda.bpf.c) include this; the agent creates the two table maps once and both objects
 * reuse them (bpf_map__reuse_fd).
 * Code built without frame pointers (libtorch, MKL, Debian's CPython) is stepped over by
 * its call frame information, compiled by the agent into rows (struct unwind_row, one
 * array for every file, `unwind_rows`, written by user space through mmap) and a list of
 * each process's mappings that have rows (`unwind_procs`). Where no row covers an
 * address, the frame pointer is followed. x86-64 only. Bounded: UNWIND_SEARCH_STEPS per
 * lookup, PROF_MAX_USTACK frames, with bpf_loop (the verifier checks one step). */
#ifndef OTEL_EBPF_UNWIND_BPF_H
#define OTEL_EBPF_UNWIND_BPF_H

#include "profile_abi.h"

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, 1); /* the agent sets the real size */
	__type(key, __u32);
	__type(value, struct unwind_row);
} unwind_rows SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, PROF_MAX_TARGETS);
	__type(key, __u32);
	__type(value, struct unwind_proc);
} unwind_procs SEC(".maps");

struct unwind_scratch {
	__u64 ips[PROF_MAX_USTACK];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct unwind_scratch);
} unwind_scratch SEC(".maps");

struct uw_state {
	__u64 pc, sp, bp;
	__u32 pid;
	__u32 n;
	__u32 limit;    /* frames the caller keeps (<= PROF_MAX_USTACK) */
	__u32 by_table, by_fp, by_scan;
	__u64 scan_ra, scan_cfa;
	bool stopped;
};

static __always_inline __u64 uw_read(__u64 addr, bool *ok)
{
	__u64 v = 0;
	if (bpf_probe_read_user(&v, sizeof(v), (void *)addr) != 0)
		*ok = false;
	return v;
}

/* Index in m[] of the mapping of p covering addr, or -1: binary search over m[0..n).
 * Global functions (here and below) are verified once, not at every call site. */
__noinline int uw_map_index(struct unwind_proc *p, __u64 addr)
{
	if (!p)
		return -1;
	__u32 lo = 0, hi = p->n;
	if (hi > UNWIND_MAX_MAPS)
		hi = UNWIND_MAX_MAPS;
	for (int i = 0; i < UNWIND_MAP_SEARCH_STEPS && lo < hi; i++) {
		__u32 mid = (lo + hi) / 2;
		struct unwind_map *m = &p->m[mid & (UNWIND_MAX_MAPS - 1)];
		if (addr < m->start)
			hi = mid;
		else if (addr >= m->end)
			lo = mid + 1;
		else
			return mid & (UNWIND_MAX_MAPS - 1);
	}
	return -1;
}

static __always_inline struct unwind_map *uw_find_map(struct unwind_proc *p, __u64 addr)
{
	__u32 k = (__u32)uw_map_index(p, addr); /* -1: out of range below */
	if (k >= UNWIND_MAX_MAPS)
		return NULL;
	return &p->m[k];
}

/* Index in unwind_rows of the row covering vaddr among rows[start .. start+count) (the
 * last with pc <= vaddr), or -1. */
__noinline int uw_row_index(__u32 start, __u32 count, __u32 vaddr)
{
	if (!count)
		return -1;
	__u32 lo = 0, hi = count - 1, key = start;
	struct unwind_row *r = bpf_map_lookup_elem(&unwind_rows, &key);
	if (!r || vaddr < r->pc)
		return -1;
	for (int i = 0; i < UNWIND_SEARCH_STEPS && lo < hi; i++) {
		__u32 mid = lo + (hi - lo + 1) / 2;
		key = start + mid;
		r = bpf_map_lookup_elem(&unwind_rows, &key);
		if (!r)
			return -1;
		if (r->pc <= vaddr)
			lo = mid;
		else
			hi = mid - 1;
	}
	return (int)(start + lo);
}

static __always_inline struct unwind_row *uw_find_row(__u32 start, __u32 count, __u32 vaddr)
{
	int i = uw_row_index(start, count, vaddr);
	if (i < 0)
		return NULL;
	__u32 key = (__u32)i;
	return bpf_map_lookup_elem(&unwind_rows, &key);
}

/* Does the code before a return address end with a call (call rel32, call r/m64)? */
static __always_inline bool uw_follows_call(__u64 ra)
{
	__u8 b[8] = {};
	if (bpf_probe_read_user(b, sizeof(b), (void *)(ra - 8)) != 0)
		return false;
	if (b[3] == 0xe8)
		return true;
	/* FF /2: ModRM reg field 2, 2 to 7 bytes long */
	return (b[6] == 0xff && (b[7] >> 3 & 7) == 2) || (b[5] == 0xff && (b[6] >> 3 & 7) == 2) ||
	       (b[4] == 0xff && (b[5] >> 3 & 7) == 2) || (b[2] == 0xff && (b[3] >> 3 & 7) == 2) ||
	       (b[1] == 0xff && (b[2] >> 3 & 7) == 2);
}

/* A return address into a file with rows, right after a call, whose own frame unwinds to
 * another such return address: what a scan of the stack accepts. */
static __always_inline bool uw_plausible(struct unwind_proc *p, __u64 ra, __u64 slot)
{
	struct unwind_map *m = uw_find_map(p, ra - 1);
	if (!m || !uw_follows_call(ra))
		return false;
	__u64 vaddr = ra - 1 - m->bias;
	if (vaddr > 0xffffffffull)
		return false;
	struct unwind_row *r = uw_find_row(m->row_start, m->row_count, (__u32)vaddr);
	if (!r || r->kind != UW_CFA_RSP)
		return false;
	bool ok = true;
	__u64 ra2 = uw_read(slot + 8 + 8ull * r->cfa - 8, &ok);
	return ok && ra2 && uw_find_map(p, ra2 - 1) && uw_follows_call(ra2);
}

/* The leaf is in a file with rows but in a gap between them: hand-written assembly
 * without call frame information (MKL's and OpenBLAS's kernels). Such kernels are leaves
 * that keep the caller's return address near the stack top: the stack is scanned for the
 * first word that is a plausible return address. */
static long uw_scan_step(__u64 i, struct uw_state *w)
{
	struct unwind_proc *p = bpf_map_lookup_elem(&unwind_procs, &w->pid);
	if (!p)
		return 1;
	bool ok = true;
	__u64 slot = w->sp + 8 * i;
	__u64 v = uw_read(slot, &ok);
	if (!ok)
		return 1;
	if (v && uw_plausible(p, v, slot)) {
		w->scan_ra = v;
		w->scan_cfa = slot + 8;
		return 1;
	}
	return 0;
}

static long uw_step(__u64 i, struct uw_state *w)
{
	__u32 zero = 0;
	struct unwind_scratch *sc = bpf_map_lookup_elem(&unwind_scratch, &zero);
	if (!sc || !w->pc)
		return 1;
	__u32 k = w->n;
	if (k >= PROF_MAX_USTACK || k >= w->limit)
		return 1;
	sc->ips[k] = w->pc;
	w->n = k + 1;
	/* a return address is the instruction after a call, maybe already another function's
	 * rules: look the call itself up */
	__u64 pc = w->n > 1 ? w->pc - 1 : w->pc;
	struct unwind_proc *p = bpf_map_lookup_elem(&unwind_procs, &w->pid);
	struct unwind_map *m = p ? uw_find_map(p, pc) : NULL;
	struct unwind_row *r = NULL;
	if (m) {
		__u64 vaddr = pc - m->bias;
		if (vaddr <= 0xffffffffull)
			r = uw_find_row(m->row_start, m->row_count, (__u32)vaddr);
	}
	bool ok = true;
	__u64 cfa, ra, bp = w->bp;
	if (m && (!r || r->kind == UW_NONE) && w->n == 1) {
		/* the leaf, in a gap of a file with rows: scan the stack for its caller */
		w->scan_ra = 0;
		bpf_loop(UNWIND_SCAN_WORDS, uw_scan_step, w, 0);
		if (!w->scan_ra)
			return 1;
		w->by_scan++;
		w->pc = w->scan_ra;
		w->sp = w->scan_cfa;
		return 0;
	}
	if (!r || r->kind == UW_NONE) {
		/* no table here: the frame pointer, when there is one */
		if (!w->bp || w->bp & 7 || w->bp < w->sp)
			return 1;
		cfa = w->bp + 16;
		ra = uw_read(w->bp + 8, &ok);
		bp = uw_read(w->bp, &ok);
		w->by_fp++;
	} else {
		switch (r->kind) {
		case UW_CFA_RSP:
			cfa = w->sp + 8ull * r->cfa;
			break;
		case UW_CFA_RBP:
			cfa = w->bp + 8ull * r->cfa;
			break;
		case UW_PLT:
			cfa = w->sp + 8 + ((w->pc & 15) >= 11 ? 8 : 0);
			break;
		default:
			w->stopped = true;
			return 1;
		}
		ra = uw_read(cfa - 8, &ok);
		if (r->rbp)
			bp = uw_read(cfa - 8ull * r->rbp, &ok);
		w->by_table++;
	}
	if (!ok || !ra || cfa <= w->sp)
		return 1; /* unreadable, the outermost frame, or a stack not growing up: done */
	w->pc = ra;
	w->sp = cfa;
	w->bp = bp;
	return 0;
}

struct uw_counts {
	__u32 by_table, by_fp, by_scan;
	bool stopped;
};

/* The current thread's user stack from registers (pc, sp, bp) into ips[limit], innermost
 * first; returns the frames found, or -1 when the process has no tables (the caller falls
 * back to bpf_get_stack). `limit` must be a constant at the call site (the copy out is
 * of limit * 8 bytes) and at most PROF_MAX_USTACK. */
static __always_inline int unwind_from(__u32 pid, __u64 pc, __u64 sp, __u64 bp, __u64 *ips,
				       const __u32 limit, struct uw_counts *c)
{
	if (!bpf_map_lookup_elem(&unwind_procs, &pid))
		return -1;
	struct uw_state w = {.pid = pid, .pc = pc, .sp = sp, .bp = bp, .limit = limit};
	bpf_loop(limit, uw_step, &w, 0);
	__u32 zero = 0;
	struct unwind_scratch *sc = bpf_map_lookup_elem(&unwind_scratch, &zero);
	if (!sc)
		return -1;
	bpf_probe_read_kernel(ips, limit * sizeof(__u64), sc->ips);
	c->by_table = w.by_table;
	c->by_fp = w.by_fp;
	c->by_scan = w.by_scan;
	c->stopped = w.stopped;
	return w.n < limit ? w.n : limit;
}

/* The interrupted thread's user stack (a perf-event sample): from its user registers. */
static __always_inline int unwind_user(__u32 pid, __u64 *ips, struct uw_counts *c)
{
	if (!bpf_map_lookup_elem(&unwind_procs, &pid))
		return -1;
	struct pt_regs *regs = (struct pt_regs *)bpf_task_pt_regs(bpf_get_current_task_btf());
	if (!regs)
		return -1;
	return unwind_from(pid, BPF_CORE_READ(regs, ip), BPF_CORE_READ(regs, sp),
			   BPF_CORE_READ(regs, bp), ips, PROF_MAX_USTACK, c);
}

#endif
