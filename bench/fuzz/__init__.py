"""Coverage-guided fuzzing of every protocol parser (atheris); see bench/fuzz/README.md."""

from otel_ebpf.protocols.fuzz_targets import fuzz_target_refs

# targets whose seed pieces live beside the tests: http1_fast, the compiled HTTP/1 heads
# against llhttp; http2_fast, HTTP/2's compiled frame loop, header block readers, syscall
# step, pairing and gRPC span against their Python references; genai, the LLM layer's Gemini and Bedrock dialects (SSE and AWS event
# stream framing); llm_openai, the compiled OpenAI chunk reader against the Python one;
# mcp and rtps script several connections of their own
BUILTIN = ("http1_fast", "http2", "http2_fast", "llm", "llm_openai", "genai", "vectordb", "mcp", "rtps")
# and every installed protocol's own (its package's fuzz.py, or an entry point of the group
# otel_ebpf.fuzz_targets), found by name without importing a parser or naming it here
REFS = {name: ref for name, ref in sorted(fuzz_target_refs().items()) if name not in BUILTIN}
REGISTERED = tuple(REFS)
TARGETS = REGISTERED + BUILTIN
