"""Coverage-guided fuzzing of every protocol parser (atheris); see bench/fuzz/README.md."""

# one per parser and HTTP layer; http1_fast: the compiled HTTP/1 heads against llhttp;
# genai: the LLM layer's Gemini and Bedrock dialects (SSE and AWS event stream framing)
TARGETS = ("http1", "http1_fast", "http2", "llm", "genai", "vectordb", "mcp", "rtps")
