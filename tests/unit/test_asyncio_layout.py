"""The CPython object layouts the entry-only task probes read (socket_trace.bpf.c): where a
Task keeps its Context (TaskObj.task_context) and where a Context says it is entered
(PyContext.ctx_entered), checked against every live interpreter found here (the agent's,
pyenv's, the distribution's stripped python3), and the BPF macros against the table."""

from __future__ import annotations

import glob
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from otel_ebpf.kernel.asyncio_probes import TASK_CONTEXT_OFFSETS, TASK_STEP_PROGRAMS

REPO = Path(__file__).resolve().parents[2]

# In the interpreter under test: the offsets at which a task holds its Context, and
# ctx_entered (an int at 40) inside and outside Context.run.
PROBE = r"""
import asyncio, contextvars, ctypes, json, struct, sys

async def main():
    ctx = contextvars.copy_context()
    async def work():
        await asyncio.sleep(0)
    task = asyncio.get_running_loop().create_task(work(), context=ctx)
    raw = ctypes.string_at(id(task), 512)
    found = [i for i in range(0, 512, 8) if struct.unpack_from("<Q", raw, i)[0] == id(ctx)]
    other = contextvars.copy_context()
    entered = lambda: struct.unpack_from("<i", ctypes.string_at(id(other), 44), 40)[0]
    print(json.dumps({"minor": sys.version_info.minor, "task_context": found,
                      "entered_in": other.run(entered), "entered_out": entered(),
                      "c_task": type(task).__module__ == "_asyncio"}))
    await task

asyncio.run(main())
"""


def interpreters() -> list[str]:
    found = {sys.executable}
    found |= set(glob.glob("/root/.pyenv/versions/3.1[1-3]*/bin/python3"))
    found |= {p for p in ("/usr/bin/python3.11", "/usr/bin/python3.12", "/usr/bin/python3.13")
              if Path(p).exists()}
    return sorted(found)


@pytest.mark.parametrize("python", interpreters())
def test_layout_matches_the_table(python):
    out = subprocess.run([python, "-c", PROBE], capture_output=True, text=True, timeout=60,
                         check=True)
    doc = json.loads(out.stdout)
    minor = doc["minor"]
    if minor not in TASK_CONTEXT_OFFSETS:
        pytest.skip(f"CPython 3.{minor} is not covered by the task probes")
    assert doc["c_task"], "asyncio's C Task is what the probes see"
    assert doc["task_context"] == [TASK_CONTEXT_OFFSETS[minor]], doc
    assert (doc["entered_in"], doc["entered_out"]) == (1, 0), doc


def test_bpf_macros_match_the_table():
    source = (REPO / "bpf/socket_trace.bpf.c").read_text()
    macros = {int(m[1]): int(m[2]) for m in
              re.finditer(r"#define TASK_CONTEXT_3(\d+) (\d+)", source)}
    assert macros == TASK_CONTEXT_OFFSETS
    for minor, program in TASK_STEP_PROGRAMS.items():
        body = source[source.index(f"BPF_KPROBE({program}"):]
        assert f"TASK_CONTEXT_3{minor})" in body[:300], program
