"""Package list: otel_ebpf plus protocols/ installed as otel_ebpf.protocols (so a new
protocol is one folder and one entry point, with no list to edit here); and the C
extensions of the per-event path, built by `pip install -e .`: the core ones of
otel_ebpf/_fast, listed here, and each protocol's accelerators, found by name: every
protocols/<name>/_X.c is module otel_ebpf.protocols.<name>._X (the compiled X.py; it
includes otel_ebpf/_fast/slots.h), so adding one touches only its protocol's folder."""

from pathlib import Path

from setuptools import Extension, find_packages, setup

FAST_FLAGS = ["-O2", "-Wall", "-Wextra", "-Wno-unused-parameter", "-Wno-missing-field-initializers"]


def protocol_accelerators() -> list[Extension]:
    """protocols/<name>/_X.c -> otel_ebpf.protocols.<name>._X, built beside X.py."""
    return [Extension(f"otel_ebpf.protocols.{path.parent.name}.{path.stem}", [path.as_posix()],
                      include_dirs=["otel_ebpf/_fast"], depends=["otel_ebpf/_fast/slots.h"],
                      extra_compile_args=FAST_FLAGS)
            for path in sorted(Path("protocols").glob("*/_*.c"))]


setup(
    packages=find_packages(include=["otel_ebpf", "otel_ebpf.*"])
    + ["otel_ebpf.protocols"]
    + [f"otel_ebpf.protocols.{name}" for name in find_packages("protocols")],
    ext_modules=[
        # libbpf's ring buffer reader, records decoded per abi.h (libbpf-dev: `make deps`)
        Extension("otel_ebpf._fast.ring", ["otel_ebpf/_fast/ring.c"],
                  include_dirs=["bpf/include"], libraries=["bpf"],
                  depends=["bpf/include/abi.h"], extra_compile_args=FAST_FLAGS),
        Extension("otel_ebpf._fast.conn", ["otel_ebpf/_fast/conn.c"],
                  depends=["otel_ebpf/_fast/slots.h"], extra_compile_args=FAST_FLAGS),
        Extension("otel_ebpf._fast.otlp", ["otel_ebpf/_fast/otlp.c"],
                  extra_compile_args=FAST_FLAGS),
        Extension("otel_ebpf._fast.maker", ["otel_ebpf/_fast/maker.c"],
                  depends=["otel_ebpf/_fast/slots.h"], extra_compile_args=FAST_FLAGS),
        Extension("otel_ebpf._fast.correlate", ["otel_ebpf/_fast/correlate.c"],
                  depends=["otel_ebpf/_fast/slots.h"], extra_compile_args=FAST_FLAGS),
        Extension("otel_ebpf._fast.table", ["otel_ebpf/_fast/table.c"],
                  extra_compile_args=FAST_FLAGS),
        *protocol_accelerators(),
    ],
)
