"""The LLM layer's CPU per exchange, by dialect, in one process (no kernel, no HTTP parser):
LLMLayer.enrich on exchanges shaped like each API's (request JSON, response whole or
streamed in one body piece per event as the kernel hands them over), span and
measurements built. Streams have 32 content events. Times are this process's CPU time
(time.process_time); medians [min–max] over rounds, µs per exchange (one span).

    .venv/bin/python bench/genai_parser_cost.py [--exchanges 2000] [--rounds 5] [--out docs/performance.md]
"""

from __future__ import annotations

import argparse
import base64
import statistics
import sys
import time
from pathlib import Path

import orjson

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from otel_ebpf.protocols.base import Role  # noqa: E402
from otel_ebpf.protocols.llm import LLMLayer  # noqa: E402
from otel_ebpf.protocols.llm.eventstream import encode_frame  # noqa: E402

from bench.side_by_side import publish  # noqa: E402
from tests.protocols.llm.build import REQ_END, body, exchange, http_span  # noqa: E402

TOKENS = 32
MS = 1_000_000
SSE = "text/event-stream"
EVENTSTREAM = "application/vnd.amazon.eventstream"
MESSAGES = [{"role": "user", "content": "Say hello to the world in three words"}]


def timed(pieces: list[bytes]) -> list[tuple[bytes, int]]:
    return [(p, REQ_END + 300 * MS + i * 40 * MS) for i, p in enumerate(pieces)]


def sse(docs: list[dict], crlf: bool = False) -> list[bytes]:
    end = b"\r\n\r\n" if crlf else b"\n\n"
    return [b"data: " + orjson.dumps(d) + end for d in docs]


def frame(event: str, doc: dict) -> bytes:
    return encode_frame({":event-type": event, ":content-type": "application/json",
                         ":message-type": "event"}, orjson.dumps(doc))


def openai_stream():
    chunk = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": "m",
             "choices": [{"index": 0, "delta": {"content": " w"}, "finish_reason": None}]}
    docs = [chunk] * TOKENS + [{"id": "chatcmpl-1", "model": "m", "choices": [], "usage": {
        "prompt_tokens": 9, "completion_tokens": TOKENS}}]
    pieces = sse(docs) + [b"data: [DONE]\n\n"]
    request = {"model": "m", "messages": MESSAGES, "stream": True, "max_tokens": 64}
    return "/v1/chat/completions", request, timed(pieces), SSE


def anthropic_stream():
    docs = [{"type": "message_start", "message": {"id": "msg", "model": "claude", "usage": {
        "input_tokens": 9, "cache_read_input_tokens": 100}}}]
    docs += [{"type": "content_block_delta", "index": 0,
              "delta": {"type": "text_delta", "text": " w"}}] * TOKENS
    docs.append({"type": "message_delta", "delta": {"stop_reason": "end_turn"},
                 "usage": {"output_tokens": TOKENS}})
    pieces = [f"event: {d['type']}\n".encode() + p for d, p in zip(docs, sse(docs), strict=True)]
    request = {"model": "claude", "messages": MESSAGES, "stream": True, "max_tokens": 64}
    return "/v1/messages", request, timed(pieces), SSE


GEMINI_REQUEST = {"contents": [{"role": "user", "parts": [{"text": MESSAGES[0]["content"]}]}],
                  "generationConfig": {"maxOutputTokens": 64, "temperature": 0.5}}
GEMINI_USAGE = {"promptTokenCount": 9, "candidatesTokenCount": TOKENS, "thoughtsTokenCount": 5,
                "cachedContentTokenCount": 4}


def gemini_chunk(text: str, finish: str | None = None) -> dict:
    candidate = {"content": {"role": "model", "parts": [{"text": text}]}, "index": 0}
    if finish:
        candidate["finishReason"] = finish
    return {"candidates": [candidate], "usageMetadata": GEMINI_USAGE,
            "modelVersion": "gemini-2.5-flash", "responseId": "r1"}


def gemini_json():
    doc = gemini_chunk(" w" * TOKENS, "STOP")
    return ("/v1beta/models/gemini-2.5-flash:generateContent", GEMINI_REQUEST,
            timed([orjson.dumps(doc)]), "application/json")


def gemini_stream():
    docs = [gemini_chunk(" w") for _ in range(TOKENS - 1)] + [gemini_chunk(" w", "STOP")]
    return ("/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse", GEMINI_REQUEST,
            timed(sse(docs, crlf=True)), SSE)


BEDROCK_REQUEST = {"messages": [{"role": "user", "content": [{"text": MESSAGES[0]["content"]}]}],
                   "inferenceConfig": {"maxTokens": 64, "temperature": 0.5}}
BEDROCK_USAGE = {"inputTokens": 9, "outputTokens": TOKENS, "totalTokens": 141,
                 "cacheReadInputTokens": 100}
BEDROCK_PATH = "/model/anthropic.claude-3-haiku-20240307-v1%3A0/"


def converse_json():
    doc = {"output": {"message": {"role": "assistant", "content": [{"text": " w" * TOKENS}]}},
           "stopReason": "end_turn", "usage": BEDROCK_USAGE, "metrics": {"latencyMs": 300}}
    return BEDROCK_PATH + "converse", BEDROCK_REQUEST, timed([orjson.dumps(doc)]), \
        "application/json"


def converse_stream():
    frames = [frame("messageStart", {"role": "assistant"})]
    frames += [frame("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": " w"},
                                           "p": "abcdefgh"})] * TOKENS
    frames += [frame("contentBlockStop", {"contentBlockIndex": 0}),
               frame("messageStop", {"stopReason": "end_turn"}),
               frame("metadata", {"usage": BEDROCK_USAGE, "metrics": {"latencyMs": 300}})]
    return BEDROCK_PATH + "converse-stream", BEDROCK_REQUEST, timed(frames), EVENTSTREAM


def invoke_stream():
    def chunk(doc: dict) -> bytes:
        return frame("chunk", {"bytes": base64.b64encode(orjson.dumps(doc)).decode()})

    docs = [{"type": "message_start", "message": {"id": "msg", "usage": {"input_tokens": 9}}}]
    docs += [{"type": "content_block_delta", "index": 0,
              "delta": {"type": "text_delta", "text": " w"}}] * TOKENS
    docs += [{"type": "message_delta", "delta": {"stop_reason": "end_turn"},
              "usage": {"output_tokens": TOKENS}},
             {"type": "message_stop", "amazon-bedrock-invocationMetrics": {
                 "inputTokenCount": 9, "outputTokenCount": TOKENS}}]
    request = {"anthropic_version": "bedrock-2023-05-31", "max_tokens": 64, "messages": MESSAGES}
    return (BEDROCK_PATH + "invoke-with-response-stream", request, timed([chunk(d) for d in docs]),
            EVENTSTREAM)


CASES = {
    "OpenAI chat, SSE (reference)": openai_stream,
    "Anthropic messages, SSE": anthropic_stream,
    "Gemini generateContent, JSON": gemini_json,
    "Gemini streamGenerateContent, SSE": gemini_stream,
    "Bedrock Converse, JSON": converse_json,
    "Bedrock ConverseStream, event stream": converse_stream,
    "Bedrock InvokeModelWithResponseStream (Anthropic)": invoke_stream,
}


def one_round(case, exchanges: int) -> float:
    """µs of CPU per exchange: a fresh exchange and span each time (the layer is shared, as
    in the agent); the bodies' Body objects are built outside the timed part."""
    path, request, pieces, content_type = case()
    layer = LLMLayer()
    work = []
    for i in range(exchanges):
        role = Role.SERVER if i % 2 else Role.CLIENT
        ex = exchange(path, body(orjson.dumps(request)), body(*pieces),
                      response_type=content_type, role=role)
        work.append((ex, http_span(ex)))
    start = time.process_time()
    for ex, span in work:
        layer.enrich(ex, span)
    elapsed = time.process_time() - start
    assert work[0][1].attributes.get("gen_ai.usage.output_tokens"), path
    return elapsed / exchanges * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--exchanges", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    results: dict[str, list[float]] = {name: [] for name in CASES}
    for _ in range(args.rounds):  # interleaved: a noisy machine slows every case alike
        for name, case in CASES.items():
            results[name].append(one_round(case, args.exchanges))
    lines = [f"### LLM layer CPU per exchange, by dialect ({time.strftime('%Y-%m-%d')}, "
             f"{args.exchanges} exchanges each, streams of {TOKENS} content events, median "
             f"[min–max] of {args.rounds} rounds)", "",
             f"`.venv/bin/python bench/genai_parser_cost.py --exchanges {args.exchanges} "
             f"--rounds {args.rounds}`", "",
             "| exchange | µs per exchange (one span) | µs per stream event |", "|---|---:|---:|"]
    for name, values in results.items():
        events = len(CASES[name]()[2])
        median = statistics.median(values)
        per_event = f"{median / events:.2f}" if events > 1 else "—"
        lines.append(f"| {name} | {median:.1f} [{min(values):.1f}–{max(values):.1f}] | "
                     f"{per_event} |")
    publish(lines, args.out)


if __name__ == "__main__":
    main()
