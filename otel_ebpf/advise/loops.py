"""Whether a function's source walks a string one character (or byte) at a time, read from
its syntax tree: what the loop iterates and what its body does with each item, never the
loop variable's name alone (`for b in biases:` is a loop over tensors)."""

from __future__ import annotations

import ast
import textwrap

# annotations and constructors whose values are text or bytes
_TEXT_TYPES = frozenset({"str", "bytes", "bytearray"})
# methods whose result is a str or bytes whatever they are called on
_TEXT_METHODS = frozenset({
    "decode", "encode", "strip", "lstrip", "rstrip", "lower", "upper", "casefold", "replace",
    "join", "format", "hex", "read", "readline", "getvalue", "tobytes", "title", "zfill"})
# what is done to a character and to nothing else: str.isdigit(ch), ch.upper(), ...
_CHAR_METHODS = frozenset({
    "isdigit", "isalpha", "isalnum", "isspace", "isupper", "islower", "isdecimal",
    "isnumeric", "isprintable", "isascii", "upper", "lower"})


def char_loop_line(source: list[tuple[int, str]]) -> int:
    """The line of the first loop over a string's characters (or a bytes object's bytes) in
    a function's numbered source lines, 0 when there is none or no part of the source
    parses."""
    tree = _parsed([text for _, text in source])
    if tree is None:
        return 0
    first = source[0][0]
    texts = _text_names(tree)
    for node in ast.walk(tree):
        if isinstance(node, (ast.For, ast.AsyncFor)):
            loops = [(node.target, node.iter, node.body, node.lineno)]
        elif isinstance(node, (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)):
            loops = [(g.target, g.iter, [node], node.lineno) for g in node.generators]
        else:
            continue
        for target, iterable, body, line in loops:
            item, iterable = _item(target, iterable)
            if item is None:
                continue
            if _is_text(iterable, texts) or _used_as_char(item, body):
                return first + line - 1
    return 0


def _parsed(lines: list[str]) -> ast.Module | None:
    """The function's syntax tree; a function cut short (source.MAX_LINES) parses up to the
    last line where its statements are whole."""
    for end in range(len(lines), 0, -1):
        try:
            return ast.parse(textwrap.dedent("\n".join(lines[:end])))
        except SyntaxError:
            continue
    return None


def _item(target: ast.expr, iterable: ast.expr) -> tuple[str | None, ast.expr]:
    """The loop's per-item name and what it walks: `for ch in s` and `for i, ch in
    enumerate(s)`."""
    if isinstance(target, ast.Name):
        return target.id, iterable
    if (isinstance(target, ast.Tuple) and len(target.elts) == 2
            and isinstance(target.elts[1], ast.Name) and isinstance(iterable, ast.Call)
            and isinstance(iterable.func, ast.Name) and iterable.func.id == "enumerate"
            and iterable.args):
        return target.elts[1].id, iterable.args[0]
    return None, iterable


def _text_names(tree: ast.AST) -> set[str]:
    """Names that hold text here: parameters annotated str/bytes, names assigned a string
    literal or the result of a string method."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.arg) and _is_text_type(node.annotation):
            names.add(node.arg)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and (
                _is_text_type(node.annotation)):
            names.add(node.target.id)
    for node in ast.walk(tree):  # after the annotations: `b = a.strip()` with `a: str`
        if isinstance(node, ast.Assign) and _is_text(node.value, names):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return names


def _is_text_type(annotation: ast.expr | None) -> bool:
    return isinstance(annotation, ast.Name) and annotation.id in _TEXT_TYPES


def _is_text(expr: ast.expr, names: set[str]) -> bool:
    if isinstance(expr, ast.Constant):
        return isinstance(expr.value, (str, bytes))
    if isinstance(expr, ast.JoinedStr):
        return True
    if isinstance(expr, ast.Name):
        return expr.id in names
    if isinstance(expr, ast.Call):
        func = expr.func
        if isinstance(func, ast.Name):
            return func.id in _TEXT_TYPES or func.id in ("repr", "chr")
        return isinstance(func, ast.Attribute) and func.attr in _TEXT_METHODS
    if isinstance(expr, ast.Subscript):  # a slice of text is text
        return isinstance(expr.slice, ast.Slice) and _is_text(expr.value, names)
    return False


def _used_as_char(item: str, body: list[ast.AST]) -> bool:
    """Whether the loop's body treats its item as a character: ord(ch), ch == "x",
    ch in "abc", ch.isdigit()."""
    for stmt in body:
        for node in ast.walk(stmt):
            if isinstance(node, ast.Call):
                func = node.func
                if (isinstance(func, ast.Name) and func.id == "ord" and node.args
                        and _is(node.args[0], item)):
                    return True
                if (isinstance(func, ast.Attribute) and func.attr in _CHAR_METHODS
                        and _is(func.value, item)):
                    return True
            elif isinstance(node, ast.Compare) and _is(node.left, item):
                for op, right in zip(node.ops, node.comparators, strict=True):
                    if isinstance(right, ast.Constant) and isinstance(right.value, (str, bytes)):
                        if isinstance(op, (ast.Eq, ast.NotEq)) and len(right.value) == 1:
                            return True
                        if isinstance(op, (ast.In, ast.NotIn)):
                            return True
    return False


def _is(expr: ast.expr, name: str) -> bool:
    return isinstance(expr, ast.Name) and expr.id == name
