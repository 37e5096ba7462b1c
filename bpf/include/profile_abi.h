/* SPDX-License-Identifier: Apache-2.0 */
/* The CPU profiler's records and settings (bpf/profile.bpf.c), shared with user space;
 * otel_ebpf/kernel/cpu_sampler.py mirrors this file and a unit test checks the sizes. */
#ifndef OTEL_EBPF_PROFILE_ABI_H
#define OTEL_EBPF_PROFILE_ABI_H

#define PROF_COMM_LEN 16
#define PROF_MAX_KSTACK 64      /* kernel frames per sample */
#define PROF_MAX_USTACK 127     /* user (native) frames per sample: perf's own default depth */
#define PROF_MAX_PY_FRAMES 96   /* Python frames walked per sample */
#define PROF_MAX_PY_THREADS 64  /* thread states searched for the sampled thread */
#define PROF_MAX_TARGETS 1024
#define PROF_MAX_WAKER_HOPS 4   /* threads without Python state followed to a dispatcher */
#define PROF_MAX_WAKERS 16384   /* threads whose last waker is remembered */
#define PROF_NO_FIELD 0xffffffffu

/* py[] entries are code object addresses (8-aligned); the low bit marks the last (outermost)
 * Python frame run by one C call of the evaluator: frames up to it interleave with one
 * _PyEval_EvalFrameDefault frame of the native stack. */
#define PY_F_ENTRY 1ull

enum py_status {
	PY_NONE = 0,        /* not a registered Python process */
	PY_OK = 1,          /* py[] holds the thread's frames (possibly none: an idle thread) */
	PY_NO_THREAD = 2,   /* no thread state of the interpreter belongs to this thread */
	PY_READ_ERROR = 3,  /* a read of the interpreter's memory failed midway */
	PY_TRUNCATED = 4,   /* deeper than PROF_MAX_PY_FRAMES: the outermost frames are missing */
	PY_NO_DISPATCHER = 5, /* no thread state of its own, and the threads that woke it (or
	                       * created it), followed PROF_MAX_WAKER_HOPS deep, have none
	                       * either (PY_NO_THREAD: nothing of the process woke it) */
};

/* A thread's dispatcher: the first thread with a Python thread state up the chain of who
 * last woke it (sched_waking, outside interrupts) or created it (sched_wakeup_new), within
 * one process. A sample of a thread without a Python thread state (an OpenMP or BLAS
 * worker, a C++ thread pool's) carries that thread's Python frames (docs/decisions.md,
 * "Worker threads' samples under their dispatcher's Python stack").
 * One record per thread of a Python process, updated in place. */
enum thread_python {
	TP_UNKNOWN = 0,
	TP_PYTHON = 1,           /* a thread state of its own, as last seen */
	TP_NATIVE = 2,           /* none */
};

struct waker {
	__u32 pid;               /* the process (tgid) of the thread */
	__u32 root;              /* its dispatcher: the thread that woke or created it when
	                          * that one runs Python (or is not known not to), else that
	                          * one's root (the last worker at a barrier wakes the rest:
	                          * the dispatcher stays known); 0: none */
	__u8 python;             /* enum thread_python, of the thread itself: from its samples,
	                          * or a thread-list search the first time it wakes a thread */
	__u8 _pad[3];
};

/* Where the interpreter keeps what the walk needs, in bytes, for one CPython version
 * (otel_ebpf/profiling/python_offsets.py). PROF_NO_FIELD: the version lacks the field. */
struct py_offsets {
	__u32 interp_head;       /* _PyRuntimeState.interpreters.head */
	__u32 threads_head;      /* PyInterpreterState.threads.head */
	__u32 tstate_next;       /* PyThreadState.next */
	__u32 tstate_native_tid; /* PyThreadState.native_thread_id */
	__u32 tstate_frame;      /* 3.11/3.12: PyThreadState.cframe; 3.13: .current_frame */
	__u32 cframe_current;    /* _PyCFrame.current_frame; PROF_NO_FIELD from 3.13 on */
	__u32 frame_previous;    /* _PyInterpreterFrame.previous */
	__u32 frame_code;        /* .f_code (3.11/3.12), .f_executable (3.13) */
	__u32 frame_owner;       /* .owner (a char): 3 = a C-stack shim frame (3.12+) */
	__u32 frame_is_entry;    /* .is_entry (a bool, 3.11); PROF_NO_FIELD after */
};

struct py_proc {
	__u64 runtime;           /* address of _PyRuntime in the process */
	struct py_offsets o;
};

struct profile_config {
	__u32 agent_pid;         /* never sampled */
	__u8 filter_pids;        /* sample only processes in target_pids (and their children) */
	__u8 filter_comms;       /* ... or whose name is in target_comms */
	__u8 unwind_tables;      /* walk user stacks with unwind tables (unwind.bpf.h) */
	__u8 _pad[1];
};

/* Unwind tables (bpf/include/unwind.bpf.h, otel_ebpf/profiling/unwind_tables.py): rows
 * of every loaded file in one array, sorted by pc within a file; a row's rules hold from
 * its pc to the next row's. */
/* mappings with a table, per process: a CUDA torch process maps ~100 executable files,
 * among them small ones on every allocation path (libc10_cuda, libcudart); 8 KiB an entry */
#define UNWIND_MAX_MAPS 256
#define UNWIND_MAP_SEARCH_STEPS 9 /* binary search over UNWIND_MAX_MAPS mappings */
#define UNWIND_SEARCH_STEPS 25   /* binary search steps: tables of up to 32M rows */
#define UNWIND_SCAN_WORDS 64     /* stack words scanned above a leaf without rules */

enum unwind_kind {
	UW_CFA_RSP = 0,          /* CFA = rsp + 8 * cfa */
	UW_CFA_RBP = 1,          /* CFA = rbp + 8 * cfa */
	UW_PLT = 2,              /* a PLT entry: CFA = rsp + 8, + 8 past its 11th byte */
	UW_STOP = 3,             /* rules the walker cannot follow, or the outermost frame */
	UW_NONE = 4,             /* no unwind information here: frame pointers */
};

struct unwind_row {
	__u32 pc;                /* virtual address in the file */
	__u8 kind;               /* enum unwind_kind */
	__u8 rbp;                /* the caller's rbp saved at CFA - 8 * rbp; 0: unchanged */
	__u16 cfa;               /* CFA offset in 8-byte units */
};

struct unwind_map {
	__u64 start;             /* executable mapping [start, end) in the process */
	__u64 end;
	__u64 bias;              /* address in the process - virtual address in the file */
	__u32 row_start;         /* the file's rows in unwind_rows */
	__u32 row_count;
};

struct unwind_proc {
	__u32 n;                 /* entries of m[] used, sorted by start */
	__u32 _pad;
	struct unwind_map m[UNWIND_MAX_MAPS];
};

struct profile_sample {
	__u64 ts_ns;             /* bpf_ktime_get_ns() */
	__u32 pid;               /* tgid */
	__u32 tid;
	__u32 cpu;
	__s32 kstack_bytes;      /* bpf_get_stack's return: bytes, or a negative errno */
	__s32 ustack_bytes;
	__u16 py_frames;         /* entries used in py[] */
	__u16 py_status;         /* enum py_status */
	char comm[PROF_COMM_LEN];/* the thread's name */
	__u32 py_tid;            /* whose Python frames py[] holds: tid, or its dispatcher's */
	__u8 py_hops;            /* wakers followed to py_tid (0: the thread's own frames) */
	__u8 _pad[3];
	__u64 kstack[PROF_MAX_KSTACK];
	__u64 ustack[PROF_MAX_USTACK];
	__u64 py[PROF_MAX_PY_FRAMES];
};

enum prof_counter_idx {
	PCNT_SAMPLES = 0,        /* samples of selected processes sent */
	PCNT_DROPS = 1,          /* the ring was full */
	PCNT_PY_ERRORS = 2,      /* Python walks that failed (PY_NO_THREAD or PY_READ_ERROR) */
	PCNT_UW_SAMPLES = 3,     /* samples whose user stack was walked with unwind tables */
	PCNT_UW_TABLE = 4,       /* frames stepped over by a table row */
	PCNT_UW_FP = 5,          /* frames stepped over by frame pointer (no row there) */
	PCNT_UW_STOPPED = 6,     /* walks ended by a row saying stop: the outermost frame
	                          * (_start), or rules the walker cannot follow */
	PCNT_UW_SCAN = 7,        /* leaves without rules stepped over by a stack scan */
	PCNT_WAKERS = 8,         /* wake-ups and thread creations within a Python process
	                          * remembered (a thread's dispatcher) */
	PCNT_WORKER = 9,         /* samples given their dispatcher's Python frames */
	PCNT_MAX = 10,
};

#endif
