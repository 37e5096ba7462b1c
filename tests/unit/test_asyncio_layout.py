"""Where a CPython thread state keeps its contextvars.Context (PyThreadState.context), the
field the kernel reads at every socket call (bpf/include/py_context.bpf.h), checked against
every live interpreter found here (the agent's, pyenv's, the distribution's stripped
python3), and the record each interpreter file gets (its _PyRuntime from the exported
PyContext_CopyCurrent, its thread list offsets)."""

from __future__ import annotations

import glob
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from otel_ebpf.kernel.asyncio_probes import (
    MAX_FILES,
    PY_CTX_RECORD,
    TSTATE_CONTEXT,
    interpreter_record,
)

REPO = Path(__file__).resolve().parents[2]

# In the interpreter under test: the offsets in the thread state that hold the Context
# it runs in, inside Context.run; and the files that hold the interpreter.
PROBE = r"""
import contextvars, ctypes, json, os, re, sys
get = ctypes.pythonapi.PyThreadState_Get
get.restype = ctypes.c_void_p
ctx = contextvars.copy_context()
def inside():
    ts = get()
    return [o for o in range(0, 1024, 8) if ctypes.c_void_p.from_address(ts + o).value == id(ctx)]
libs = sorted({l.split()[-1] for l in open("/proc/self/maps")
               if re.search(r"/libpython3\.\d+[^/]*\.so", l)})
print(json.dumps({"version": list(sys.version_info[:2]), "context": ctx.run(inside),
                  "file": libs[0] if libs else os.path.realpath(sys.executable)}))
"""


def interpreters() -> list[str]:
    found = {sys.executable}
    found |= set(glob.glob("/root/.pyenv/versions/3.1[1-3]*/bin/python3"))
    found |= {p for p in ("/usr/bin/python3.11", "/usr/bin/python3.12", "/usr/bin/python3.13")
              if Path(p).exists()}
    return sorted(found)


@pytest.mark.parametrize("python", interpreters())
def test_thread_state_context_matches_the_table(python):
    out = subprocess.run([python, "-c", PROBE], capture_output=True, text=True, timeout=60,
                         check=True)
    doc = json.loads(out.stdout)
    version = tuple(doc["version"])
    if version not in TSTATE_CONTEXT:
        pytest.skip(f"CPython {version} is not covered by the context probes")
    assert doc["context"] == [TSTATE_CONTEXT[version]], doc
    # its file gives a record: PyContext_CopyCurrent is exported, stripped builds too
    offset, record = interpreter_record(doc["file"])
    assert offset > 0 and len(record) == PY_CTX_RECORD.size
    fields = PY_CTX_RECORD.unpack(record)
    assert fields[5] == TSTATE_CONTEXT[version]


def test_bpf_record_matches_the_packing():
    header = (REPO / "bpf/include/py_context.bpf.h").read_text()
    body = header[header.index("struct py_ctx_proc {"):header.index("};", header.index(
        "struct py_ctx_proc {"))]
    fields = re.findall(r"__(u64|u32)\s+\w+;", body)
    assert "".join("q" if f == "u64" else "I" for f in fields) == PY_CTX_RECORD.format[1:]
    assert f"#define PY_CTX_FILES {MAX_FILES} " in header
