"""bench/tracing_share.py: which samples of `perf script -F ip,sym` count as the traced
program paying for being traced, and under which part."""

from bench.tracing_share import parse_script, part_of

# three samples as perf script prints them: a BPF program under a syscall exit, a uprobe's
# trap with no program on the stack yet, and the program's own work in CPython
SCRIPT = """
\tffffffff815339b0 __htab_map_lookup_elem
\tffffffffc003d3fe bpf_prog_c4d0864241d9a8a2_exit_sendto
\tffffffff814d0b80 trace_call_bpf
\tffffffff814c4b3e perf_syscall_exit
\tffffffff8142513c syscall_exit_work
\tffffffff8223cb23 do_syscall_64
\t          10ab59 __send

\tffffffff81234567 handle_swbp
\tffffffff81234000 exc_int3
\t          2a1b2c PyContext_CopyCurrent

\t           fca99 _PyEval_EvalFrameDefault
\t    7f7d3e2d6240 [unknown]

\tffffffff814c4000 perf_trace_buf_alloc
\tffffffff814c4b00 perf_syscall_enter
\tffffffff81425000 syscall_trace_enter
\tffffffff8223cb23 do_syscall_64
"""


def test_samples_are_split_by_what_they_paid_for():
    share = parse_script(SCRIPT)
    assert share.samples == 4
    assert dict(share.by_part) == {"exit_sendto": 1, "uprobe": 1, "perf_syscall_enter": 1}
    assert share.traced == 3
    assert share.fraction == 0.75


def test_a_program_is_named_before_the_frames_that_called_it():
    chain = ["bpf_ringbuf_query", "bpf_prog_0123abcd_context_copy_return", "uprobe_dispatcher",
             "handler_chain", "uprobe_notify_resume"]
    assert part_of(chain) == "context_copy_return"


def test_the_kernel_work_of_an_untraced_syscall_is_the_programs_own():
    assert part_of(["tcp_sendmsg_locked", "tcp_sendmsg", "__sys_sendto", "do_syscall_64"]) is None
    assert parse_script("").samples == 0
