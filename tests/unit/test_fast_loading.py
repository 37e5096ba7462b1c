"""How compiled modules are found: the core's by name, a protocol's accelerator as the `_X`
sibling of its module X (otel_ebpf._fast.accelerator), and what `otel-ebpf check` says
about them (status), protocols' accelerators found in their folders."""

from __future__ import annotations

from pathlib import Path

import pytest
from otel_ebpf.protocols.http1 import parse as http1_parse

from otel_ebpf import _fast

REPO = Path(__file__).resolve().parents[2]


def test_every_protocol_source_is_an_accelerator_found():
    sources = {f"otel_ebpf.protocols.{p.parent.name}.{p.stem}"
               for p in (REPO / "protocols").glob("*/_*.c")}
    assert sources, "no protocol accelerator sources"
    assert sources <= {name for name, _ in _fast.accelerators()}


@pytest.mark.skipif(_fast.PURE_PYTHON, reason="OTEL_EBPF_PURE_PYTHON=1: nothing compiled loads")
def test_the_accelerator_is_the_underscored_sibling():
    module = _fast.accelerator(http1_parse.__name__)
    assert module is not None, "otel_ebpf.protocols.http1._parse is not built (make install)"
    assert module.__name__ == "otel_ebpf.protocols.http1._parse"
    assert http1_parse.compiled is module
    assert _fast.accelerator("otel_ebpf.protocols.http1.no_such_module") is None


def test_pure_python_loads_no_accelerator(monkeypatch):
    monkeypatch.setattr(_fast, "PURE_PYTHON", True)
    assert _fast.accelerator(http1_parse.__name__) is None
    compiled, detail = _fast.status()
    assert not compiled and "OTEL_EBPF_PURE_PYTHON=1" in detail


@pytest.mark.skipif(_fast.PURE_PYTHON, reason="OTEL_EBPF_PURE_PYTHON=1: nothing compiled loads")
def test_status_names_what_is_not_built(monkeypatch):
    found = _fast.accelerators()
    monkeypatch.setattr(_fast, "accelerators",
                        lambda: [*found, ("otel_ebpf.protocols.nothing._here", False)])
    monkeypatch.setattr(_fast, "table", None)
    compiled, detail = _fast.status()
    assert compiled
    assert detail.startswith("on (not built: ")
    assert "table" in detail and "otel_ebpf.protocols.nothing._here" in detail
    assert "http1._parse" not in detail
