"""Package list: otel_ebpf plus protocols/ installed as otel_ebpf.protocols (so a new
protocol is one folder and one entry point, with no list to edit here); and the C
extensions of otel_ebpf/_fast (the per-event path), built by `pip install -e .`."""

from setuptools import Extension, find_packages, setup

FAST_FLAGS = ["-O2", "-Wall", "-Wextra", "-Wno-unused-parameter", "-Wno-missing-field-initializers"]

setup(
    packages=find_packages(include=["otel_ebpf", "otel_ebpf.*"])
    + ["otel_ebpf.protocols"]
    + [f"otel_ebpf.protocols.{name}" for name in find_packages("protocols")],
    ext_modules=[
        # libbpf's ring buffer reader, records decoded per abi.h (libbpf-dev: `make deps`)
        Extension("otel_ebpf._fast.ring", ["otel_ebpf/_fast/ring.c"],
                  include_dirs=["bpf/include"], libraries=["bpf"],
                  depends=["bpf/include/abi.h"], extra_compile_args=FAST_FLAGS),
        Extension("otel_ebpf._fast.http1", ["otel_ebpf/_fast/http1.c"],
                  depends=["otel_ebpf/_fast/slots.h"], extra_compile_args=FAST_FLAGS),
        Extension("otel_ebpf._fast.conn", ["otel_ebpf/_fast/conn.c"],
                  depends=["otel_ebpf/_fast/slots.h"], extra_compile_args=FAST_FLAGS),
        Extension("otel_ebpf._fast.otlp", ["otel_ebpf/_fast/otlp.c"],
                  extra_compile_args=FAST_FLAGS),
        Extension("otel_ebpf._fast.rtps", ["otel_ebpf/_fast/rtps.c"],
                  depends=["otel_ebpf/_fast/slots.h"], extra_compile_args=FAST_FLAGS),
        Extension("otel_ebpf._fast.sse", ["otel_ebpf/_fast/sse.c"],
                  depends=["otel_ebpf/_fast/slots.h"], extra_compile_args=FAST_FLAGS),
        Extension("otel_ebpf._fast.maker", ["otel_ebpf/_fast/maker.c"],
                  depends=["otel_ebpf/_fast/slots.h"], extra_compile_args=FAST_FLAGS),
        Extension("otel_ebpf._fast.h2", ["otel_ebpf/_fast/h2.c"],
                  depends=["otel_ebpf/_fast/slots.h"], extra_compile_args=FAST_FLAGS),
        Extension("otel_ebpf._fast.correlate", ["otel_ebpf/_fast/correlate.c"],
                  depends=["otel_ebpf/_fast/slots.h"], extra_compile_args=FAST_FLAGS),
        Extension("otel_ebpf._fast.h2span", ["otel_ebpf/_fast/h2span.c"],
                  depends=["otel_ebpf/_fast/slots.h"], extra_compile_args=FAST_FLAGS),
        Extension("otel_ebpf._fast.table", ["otel_ebpf/_fast/table.c"],
                  extra_compile_args=FAST_FLAGS),
    ],
)
