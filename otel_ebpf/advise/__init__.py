"""`otel-ebpf advise`: ranked findings from the agent's own outputs (profiles, spans,
metrics), each with its evidence and a location in the code; readers (files in), analyses
(one per signal), ranking, rendering, and an optional OpenAI-compatible model that turns
the top findings and their source into a concrete change."""
