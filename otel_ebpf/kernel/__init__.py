"""The only code that touches libbpf: binding, loader, ring buffer, ABI."""
