"""Package list: otel_ebpf plus protocols/ installed as otel_ebpf.protocols (so a new
protocol is one folder and one entry point, with no list to edit here)."""

from setuptools import find_packages, setup

setup(
    packages=find_packages(include=["otel_ebpf", "otel_ebpf.*"])
    + ["otel_ebpf.protocols"]
    + [f"otel_ebpf.protocols.{name}" for name in find_packages("protocols")]
)
