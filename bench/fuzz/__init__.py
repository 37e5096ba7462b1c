"""Coverage-guided fuzzing of every protocol parser (atheris); see bench/fuzz/README.md."""

TARGETS = ("http1", "http2", "llm", "vectordb", "rtps")  # one per parser and HTTP layer
