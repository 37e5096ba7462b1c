"""Frames of a merged stack, and where the Python frames go among the native ones."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

KERNEL, NATIVE, PYTHON = "kernel", "native", "python"
CUDA = "cuda"  # a GPU kernel, at the leaf of a launch profile's stack
CUDA_MODULE = "[cuda kernel]"  # the module such a frame is written with (read back by advise)
MARKER = "marker"  # a frame the profiler adds: no code of the program's
EVAL_FUNCTION = "_PyEval_EvalFrameDefault"


@dataclass(frozen=True, slots=True)
class Frame:
    """One frame. `module` is the file (ELF path, the .py file for Python, "[kernel]");
    `address` is file-relative for native frames (what pprof/OTLP call the address in
    the mapping); `line` is the function's first line for Python frames."""

    name: str
    module: str
    kind: str
    address: int = 0
    line: int = 0

    @property
    def is_eval(self) -> bool:
        return self.kind == NATIVE and self.name.startswith(EVAL_FUNCTION)


def python_groups(py: Sequence[Frame], entry_flags: Sequence[bool]) -> list[list[Frame]]:
    """Split Python frames (innermost first) into the runs one evaluator call executed:
    a run ends at a frame flagged as its call's entry frame."""
    groups: list[list[Frame]] = [[]]
    for frame, entry in zip(py, entry_flags, strict=True):
        groups[-1].append(frame)
        if entry:
            groups.append([])
    return [g for g in groups if g]


def merge(kernel: Sequence[Frame], native: Sequence[Frame],
          groups: Sequence[Sequence[Frame]]) -> list[Frame]:
    """One stack, innermost first: kernel frames, then the native frames with each
    `_PyEval_EvalFrameDefault` replaced by the Python frames it was running (innermost
    evaluator call first). Python frames left over (the native unwind stopped early, as
    it does in code built without frame pointers: often only the leaf is known) go below
    the native frames that were recovered, so the Python caller of a native function is
    still its parent."""
    out = list(kernel)
    pending = list(groups)
    for frame in native:
        if frame.is_eval and pending:
            out.extend(pending.pop(0))
        else:
            out.append(frame)
    for group in pending:
        out.extend(group)
    return out


# Between the Python frames of the thread that handed work out (a function calling
# torch.matmul with several intra-op threads) and the frames of the worker thread that ran
# it (gomp_thread_start, the BLAS kernel): the worker's CPU shows under its dispatcher's
# Python caller, and this frame says that it was not the dispatcher's own thread
# (docs/decisions.md, "Worker threads' samples under their dispatcher's Python stack").
# One name for every worker and dispatcher, so the workers' time adds up in one place of a
# flame graph; which threads: the sample's `thread.id` (the worker) and
# `dispatcher.thread.id` attributes.
WORKER_FRAME = Frame("[dispatched to worker threads]", "[worker]", MARKER)


def merge_dispatched(kernel: Sequence[Frame], native: Sequence[Frame],
                     groups: Sequence[Sequence[Frame]]) -> list[Frame]:
    """A worker's stack: its kernel and native frames (no evaluator among them: the thread
    runs no Python), then WORKER_FRAME, then its dispatcher's Python frames."""
    out = list(kernel) + list(native) + [WORKER_FRAME]
    for group in groups:
        out.extend(group)
    return out
