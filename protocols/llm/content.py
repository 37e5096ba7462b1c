"""Opt-in message content: request and response messages in the semconv JSON shape, cut to
a byte budget.

Only message text, reasoning and tool calls are copied, never other request fields (they
may hold keys or user ids). Images, audio and files appear as a part naming their type,
without their data. Over the byte budget the newest messages stay whole (the latest turn
says most about this call), the one before them is cut to the room left, older ones go.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

from .endpoints import ANTHROPIC, BEDROCK, GEMINI, OLLAMA, OPENAI, Route
from .response import Choice, ResponseInfo, mapping, sequence, text

Message = dict[str, Any]
Part = dict[str, Any]
_CUT_FIELDS = ("content", "response", "arguments")


def _text(value: str) -> Part:
    return {"type": "text", "content": value}


def _arguments(value: Any) -> Any:
    """Tool arguments as an object when they are JSON (semconv prefers it), else as sent."""
    if isinstance(value, str):
        try:
            return orjson.loads(value)
        except orjson.JSONDecodeError:
            return value
    return value


def _tool_call(call_id: Any, name: Any, arguments: Any) -> Part:
    part: Part = {"type": "tool_call", "name": text(name) or ""}
    if text(call_id):
        part["id"] = call_id
    if arguments is not None:
        part["arguments"] = _arguments(arguments)
    return part


def _response_text(value: Any) -> Any:
    """A tool result: text, or a list of content blocks whose texts are joined."""
    if isinstance(value, list):
        return "".join(
            block.get("text", "")
            for block in value
            if isinstance(block, dict) and isinstance(block.get("text"), str)
        )
    return value if isinstance(value, str | dict) else ""


# input, per dialect ----------------------------------------------------------------------


def _openai_parts(content: Any) -> list[Part]:
    if isinstance(content, str):
        return [_text(content)] if content else []
    parts = []
    for block in sequence(content):
        block = mapping(block)
        kind = block.get("type")
        if kind in ("text", "input_text", "output_text") and isinstance(block.get("text"), str):
            parts.append(_text(block["text"]))
        elif isinstance(kind, str):
            parts.append({"type": kind})  # an image, audio or file: its type, not its data
    return parts


def _openai_message(message: dict[str, Any]) -> Message:
    role = text(message.get("role")) or "user"
    if role == "tool":
        response = _response_text(message.get("content"))
        part: Part = {"type": "tool_call_response", "response": response}
        if text(message.get("tool_call_id")):
            part["id"] = message["tool_call_id"]
        return {"role": role, "parts": [part]}
    parts = _openai_parts(message.get("content"))
    for call in sequence(message.get("tool_calls")):
        call = mapping(call)
        function = mapping(call.get("function"))
        parts.append(_tool_call(call.get("id"), function.get("name"), function.get("arguments")))
    return {"role": role, "parts": parts}


def _openai_input(doc: dict[str, Any]) -> tuple[list[Message], list[Part]]:
    if "messages" in doc:
        return [_openai_message(mapping(m)) for m in sequence(doc.get("messages"))], []
    prompt = doc.get("prompt")  # legacy completions: a string or a list of them
    prompts = [prompt] if isinstance(prompt, str) else sequence(prompt)
    parts = [_text(p) for p in prompts if isinstance(p, str)]
    return ([{"role": "user", "parts": parts}] if parts else []), []


def _responses_item(item: dict[str, Any]) -> Message:
    kind = item.get("type")
    if kind == "function_call_output":
        part: Part = {"type": "tool_call_response", "response": _response_text(item.get("output"))}
        if text(item.get("call_id")):
            part["id"] = item["call_id"]
        return {"role": "tool", "parts": [part]}
    if kind == "function_call":
        call = _tool_call(item.get("call_id"), item.get("name"), item.get("arguments"))
        return {"role": "assistant", "parts": [call]}
    return {"role": text(item.get("role")) or "user", "parts": _openai_parts(item.get("content"))}


def _responses_input(doc: dict[str, Any]) -> tuple[list[Message], list[Part]]:
    given = doc.get("input")
    if isinstance(given, str):
        messages = [{"role": "user", "parts": [_text(given)]}]
    else:
        messages = [_responses_item(mapping(item)) for item in sequence(given)]
    instructions = text(doc.get("instructions"))
    return messages, [_text(instructions)] if instructions else []


def _anthropic_block(block: dict[str, Any]) -> Part | None:
    kind = block.get("type")
    if kind == "text":
        return _text(block["text"]) if isinstance(block.get("text"), str) else None
    if kind == "thinking":
        return {"type": "reasoning", "content": text(block.get("thinking")) or ""}
    if kind == "tool_use":
        return _tool_call(block.get("id"), block.get("name"), block.get("input"))
    if kind == "tool_result":
        part: Part = {
            "type": "tool_call_response",
            "response": _response_text(block.get("content")),
        }
        if text(block.get("tool_use_id")):
            part["id"] = block["tool_use_id"]
        return part
    return {"type": kind} if isinstance(kind, str) else None


def _anthropic_parts(content: Any) -> list[Part]:
    if isinstance(content, str):
        return [_text(content)] if content else []
    parts = (_anthropic_block(mapping(block)) for block in sequence(content))
    return [part for part in parts if part is not None]


def _anthropic_input(doc: dict[str, Any]) -> tuple[list[Message], list[Part]]:
    messages = [
        {
            "role": text(mapping(m).get("role")) or "user",
            "parts": _anthropic_parts(mapping(m).get("content")),
        }
        for m in sequence(doc.get("messages"))
    ]
    return messages, _anthropic_parts(doc.get("system"))


def _ollama_message(message: dict[str, Any]) -> Message:
    parts = [_text(message["content"])] if text(message.get("content")) else []
    parts += [{"type": "image"} for _ in sequence(message.get("images"))]
    for call in sequence(message.get("tool_calls")):
        function = mapping(mapping(call).get("function"))
        parts.append(_tool_call(None, function.get("name"), function.get("arguments")))
    return {"role": text(message.get("role")) or "user", "parts": parts}


def _ollama_input(doc: dict[str, Any]) -> tuple[list[Message], list[Part]]:
    system = text(doc.get("system"))
    instructions = [_text(system)] if system else []
    if "messages" in doc:
        return [_ollama_message(mapping(m)) for m in sequence(doc.get("messages"))], instructions
    prompt = text(doc.get("prompt"))
    return ([{"role": "user", "parts": [_text(prompt)]}] if prompt else []), instructions


def _gemini_part(part: dict[str, Any]) -> Part:
    call, result = mapping(part.get("functionCall")), mapping(part.get("functionResponse"))
    if call:
        return _tool_call(call.get("id"), call.get("name"), call.get("args"))
    if result:
        out: Part = {"type": "tool_call_response", "response": result.get("response")}
        if text(result.get("id")):
            out["id"] = result["id"]
        return out
    if isinstance(part.get("text"), str):
        if part.get("thought") is True:
            return {"type": "reasoning", "content": part["text"]}
        return _text(part["text"])
    # inlineData, fileData, executableCode...: the kind of part, not its data
    return {"type": next(iter(part), "unknown")}


def _gemini_parts(content: Any) -> list[Part]:
    return [_gemini_part(mapping(part)) for part in sequence(mapping(content).get("parts"))]


def _gemini_input(doc: dict[str, Any]) -> tuple[list[Message], list[Part]]:
    contents = doc.get("contents")
    if isinstance(contents, dict):  # one Content instead of a list is accepted by the API
        contents = [contents]
    messages = []
    for item in sequence(contents):
        role = text(mapping(item).get("role")) or "user"
        messages.append({"role": "assistant" if role == "model" else role,
                         "parts": _gemini_parts(item)})
    system = doc.get("systemInstruction") or doc.get("system_instruction")
    return messages, _gemini_parts(system)


def _converse_block(block: dict[str, Any]) -> Part:
    if isinstance(block.get("text"), str):
        return _text(block["text"])
    tool, result = mapping(block.get("toolUse")), mapping(block.get("toolResult"))
    if tool:
        return _tool_call(tool.get("toolUseId"), tool.get("name"), tool.get("input"))
    if result:
        blocks = [mapping(b) for b in sequence(result.get("content"))]
        response = "".join(b["text"] for b in blocks if isinstance(b.get("text"), str))
        out: Part = {"type": "tool_call_response", "response": response}
        if text(result.get("toolUseId")):
            out["id"] = result["toolUseId"]
        return out
    reasoning = mapping(mapping(block.get("reasoningContent")).get("reasoningText"))
    if reasoning:
        return {"type": "reasoning", "content": text(reasoning.get("text")) or ""}
    return {"type": next(iter(block), "unknown")}  # image, document, video: the kind only


def _converse_input(doc: dict[str, Any]) -> tuple[list[Message], list[Part]]:
    messages = [
        {
            "role": text(mapping(m).get("role")) or "user",
            "parts": [_converse_block(mapping(b)) for b in sequence(mapping(m).get("content"))],
        }
        for m in sequence(doc.get("messages"))
    ]
    system = [_converse_block(mapping(b)) for b in sequence(doc.get("system"))]
    return messages, system


def _invoke_input(doc: dict[str, Any]) -> tuple[list[Message], list[Part]]:
    """InvokeModel: Anthropic's messages (anthropic_version says so), Nova's Converse-like
    ones, or one prompt (Llama's `prompt`, Titan's `inputText`)."""
    if "anthropic_version" in doc:
        return _anthropic_input(doc)
    if "messages" in doc:
        return _converse_input(doc)
    prompt = text(doc.get("prompt")) or text(doc.get("inputText"))
    return ([{"role": "user", "parts": [_text(prompt)]}] if prompt else []), []


_INPUT: dict[tuple[str, bool], Callable[[dict[str, Any]], tuple[list[Message], list[Part]]]] = {
    (OPENAI, False): _openai_input,
    (OPENAI, True): _responses_input,
    (ANTHROPIC, False): _anthropic_input,
    (OLLAMA, False): _ollama_input,
    (GEMINI, False): _gemini_input,
    (BEDROCK, False): _converse_input,
    (BEDROCK, True): _invoke_input,
}


def input_messages(doc: dict[str, Any], route: Route) -> tuple[list[Message], list[Part]]:
    """(gen_ai.input.messages, gen_ai.system_instructions) from a whole request body."""
    return _INPUT[(route.dialect, route.responses_api or route.invoke)](doc)


# output ----------------------------------------------------------------------------------


def _output_message(choice: Choice) -> Message:
    parts: list[Part] = []
    if choice.reasoning:
        parts.append({"type": "reasoning", "content": "".join(choice.reasoning)})
    if choice.text:
        parts.append(_text("".join(choice.text)))
    for call in choice.tool_calls.values():
        arguments = call.arguments if call.arguments is not None else "".join(call.fragments)
        parts.append(_tool_call(call.id, call.name, arguments))
    message: Message = {"role": "assistant", "parts": parts}
    # semconv requires finish_reason; a stream cut before its end has none, and we leave it
    # out rather than invent one
    if choice.finish_reason:
        message["finish_reason"] = choice.finish_reason
    return message


def output_messages(info: ResponseInfo) -> list[Message]:
    return [_output_message(info.choices[index]) for index in sorted(info.choices)]


# the byte budget -------------------------------------------------------------------------


def _slots(items: list[dict[str, Any]]) -> list[tuple[dict[str, Any], str]]:
    """(part, field) of every text that may be cut: part contents, tool results, arguments."""
    out = []
    for item in items:
        parts = item.get("parts") if "parts" in item else [item]
        for part in parts:
            for name in _CUT_FIELDS:
                if name in part:
                    out.append((part, name))
    return out


def _escaped_len(value: str) -> int:
    return len(orjson.dumps(value)) - 2


def _cut(value: str, room: int) -> str:
    """`value` cut so that its JSON-escaped UTF-8 form takes at most `room` bytes."""
    cut = value.encode()[:room].decode("utf-8", "ignore")
    while cut and _escaped_len(cut) > room:  # escapes (quotes, control chars) take more
        cut = cut[: max(len(cut) - (_escaped_len(cut) - room), 0)]
    return cut


def _shrink(item: dict[str, Any], room: int) -> dict[str, Any] | None:
    """`item` with its texts cut so its JSON takes at most `room` bytes, or None."""
    item = _copy(item)
    slots = _slots([item])
    values = []
    for part, name in slots:
        value = part[name]
        values.append(value if isinstance(value, str) else orjson.dumps(value).decode())
        part[name] = ""
    room -= len(orjson.dumps(item))
    if room < 0:
        return None
    # water-filling: short texts stay whole, long ones share the rest equally
    order = sorted(range(len(values)), key=lambda i: _escaped_len(values[i]))
    left = len(values)
    for i in order:
        cut = _cut(values[i], room // left)
        part, name = slots[i]
        part[name] = cut
        room -= _escaped_len(cut)
        left -= 1
    return item


def _copy(item: dict[str, Any]) -> dict[str, Any]:
    if "parts" in item:
        return {**item, "parts": [dict(part) for part in item["parts"]]}
    return dict(item)


def fit(items: list[dict[str, Any]], limit: int) -> str | None:
    """The items as a JSON string of at most `limit` bytes, or None if none fits: the
    newest whole, then the one before cut to the room left, the older ones dropped."""
    if not items:
        return None
    out = orjson.dumps(items)
    if len(out) <= limit:
        return out.decode()
    kept: list[dict[str, Any]] = []  # newest first
    used = 2  # the brackets
    for item in reversed(items):
        comma = 1 if kept else 0
        size = len(orjson.dumps(item)) + comma
        if used + size <= limit:
            kept.append(item)
            used += size
            continue
        cut = _shrink(item, limit - used - comma)
        if cut is not None:
            kept.append(cut)
        break
    return orjson.dumps(kept[::-1]).decode() if kept else None
