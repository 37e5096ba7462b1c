"""Gemini and Bedrock calls made by their real client libraries, one process per run:
`google-genai` (generate_content, generate_content_stream over SSE, embed_content) and
`boto3`'s bedrock-runtime client (converse, converse_stream, invoke_model,
invoke_model_with_response_stream). Prints one JSON line per call with what the SDK
itself parsed (tokens, tool calls), for the test to compare with the spans.

    python -m tests.integration.peers.genai_client gemini|bedrock ROOT_URL CALL [CALL...]

A CALL is `kind:model`; the model name is unique per test so spans can be found by it.
Timing and usage headers go to tests/support/gemini_server.py / bedrock_server.py.
"""

from __future__ import annotations

import json
import sys

HEADERS = {"x-test-first-token-ms": "300", "x-test-token-interval-ms": "40", "x-test-tokens": "6"}
SECRET = "SECRET-tool-argument-never-exported"


def _emit(kind: str, model: str, **extra) -> None:
    print(json.dumps({"kind": kind, "model": model, **extra}), flush=True)


def gemini(root_url: str, kind: str, model: str) -> None:
    from google import genai
    from google.genai import types

    headers = {**HEADERS, "x-test-cached-tokens": "2", "x-test-thoughts-tokens": "5"}
    client = genai.Client(api_key="AIza-test-SECRET-key", http_options=types.HttpOptions(
        base_url=root_url, headers=headers, timeout=30_000))
    tools = [types.Tool(function_declarations=[
        types.FunctionDeclaration(name="get_weather", description="weather of a city"),
        types.FunctionDeclaration(name="get_time", description="time in a city")])]
    config = types.GenerateContentConfig(max_output_tokens=64, temperature=0.5, tools=tools)
    contents = f"What is the weather in Paris? {SECRET}"
    if kind == "generate":
        reply = client.models.generate_content(model=model, contents=contents, config=config)
        u = reply.usage_metadata
        _emit(kind, model, input=u.prompt_token_count, output=u.candidates_token_count,
              thoughts=u.thoughts_token_count, cached=u.cached_content_token_count,
              tools=[c.name for c in reply.function_calls or []])
    elif kind == "stream":
        chunks, last = 0, None
        for chunk in client.models.generate_content_stream(model=model, contents=contents,
                                                           config=config):
            chunks += bool(chunk.text)
            last = chunk
        u = last.usage_metadata
        _emit(kind, model, chunks=chunks, input=u.prompt_token_count,
              output=u.candidates_token_count, thoughts=u.thoughts_token_count,
              tools=[c.name for c in last.function_calls or []])
    elif kind == "embed":
        reply = client.models.embed_content(model=model, contents="hello world", config=types.
                                            EmbedContentConfig(output_dimensionality=4))
        _emit(kind, model, dimensions=len(reply.embeddings[0].values))
    elif kind == "missing":
        try:
            client.models.generate_content(model=model, contents="hi")
        except genai.errors.ClientError as err:
            _emit(kind, model, status=err.code)
    else:
        raise SystemExit(f"unknown gemini call {kind!r}")


def bedrock(root_url: str, kind: str, model: str) -> None:
    import boto3

    client = boto3.client("bedrock-runtime", endpoint_url=root_url, region_name="us-east-1",
                          aws_access_key_id="AKIATESTSECRET", aws_secret_access_key="secret")

    def add_headers(request, **_):
        for name, value in HEADERS.items():
            request.headers[name] = value

    client.meta.events.register("before-sign.bedrock-runtime.*", add_headers)
    messages = [{"role": "user", "content": [
        {"text": "You are a weather bot for the city of Paris in France"},
        {"cachePoint": {"type": "default"}}, {"text": f"weather? {SECRET}"}]}]
    tools = {"tools": [{"toolSpec": {"name": "get_weather", "inputSchema": {"json": {
        "type": "object"}}}}]}
    inference = {"maxTokens": 64, "temperature": 0.5}
    if kind == "converse":
        # twice: the first writes the prompt's prefix to the cache, the second reads it
        for _ in range(2):
            reply = client.converse(modelId=model, messages=messages, toolConfig=tools,
                                    inferenceConfig=inference)
        u = reply["usage"]
        content = reply["output"]["message"]["content"]
        _emit(kind, model, input=u["inputTokens"], output=u["outputTokens"],
              cache_read=u.get("cacheReadInputTokens"),
              tools=[b["toolUse"]["name"] for b in content if "toolUse" in b])
    elif kind == "converse-stream":
        reply = client.converse_stream(modelId=model, messages=messages, toolConfig=tools,
                                       inferenceConfig=inference)
        chunks, usage, names = 0, None, []
        for event in reply["stream"]:
            chunks += "text" in event.get("contentBlockDelta", {}).get("delta", {})
            start = event.get("contentBlockStart", {}).get("start", {})
            names += [start["toolUse"]["name"]] if "toolUse" in start else []
            usage = event.get("metadata", {}).get("usage", usage)
        _emit(kind, model, chunks=chunks, input=usage["inputTokens"],
              output=usage["outputTokens"], cache_read=usage.get("cacheReadInputTokens"),
              tools=names)
    elif kind in ("invoke", "invoke-stream"):
        body = json.dumps({"anthropic_version": "bedrock-2023-05-31", "max_tokens": 64,
                           "messages": [{"role": "user", "content": "hi"}]})
        if kind == "invoke":
            reply = json.loads(client.invoke_model(modelId=model, body=body)["body"].read())
            _emit(kind, model, output=reply["usage"]["output_tokens"])
        else:
            reply = client.invoke_model_with_response_stream(modelId=model, body=body)
            events = [json.loads(e["chunk"]["bytes"]) for e in reply["body"] if "chunk" in e]
            _emit(kind, model, events=len(events))
    elif kind == "missing":
        try:
            client.converse(modelId=model, messages=messages)
        except client.exceptions.ResourceNotFoundException as err:
            _emit(kind, model, status=err.response["ResponseMetadata"]["HTTPStatusCode"])
    else:
        raise SystemExit(f"unknown bedrock call {kind!r}")


def main(argv: list[str]) -> None:
    api, root_url, *calls = argv
    call = {"gemini": gemini, "bedrock": bedrock}[api]
    for item in calls:
        kind, _, model = item.partition(":")
        call(root_url, kind, model)


if __name__ == "__main__":
    main(sys.argv[1:])
