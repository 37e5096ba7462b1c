"""Coverage-guided fuzzing of every protocol parser (atheris); see bench/fuzz/README.md."""

from importlib.metadata import entry_points

# targets whose seed pieces live beside the tests: http1_fast, the compiled HTTP/1 heads
# against llhttp; genai, the LLM layer's Gemini and Bedrock dialects (SSE and AWS event
# stream framing); mcp and rtps script several connections of their own
BUILTIN = ("http1_fast", "http2", "llm", "genai", "vectordb", "mcp", "rtps")
# and every installed protocol's own (entry point group otel_ebpf.fuzz_targets: a
# FuzzTarget from otel_ebpf.protocols.testing), found without naming it here
REGISTERED = tuple(sorted(ep.name for ep in entry_points(group="otel_ebpf.fuzz_targets")
                          if ep.name not in BUILTIN))
TARGETS = REGISTERED + BUILTIN
