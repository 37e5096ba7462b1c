"""protocols.base.positional_maker builds what the dataclass's own constructor builds: the
same fields, the same defaults, a fresh object for each mutable default."""

from __future__ import annotations

import dataclasses
import importlib

import pytest
from otel_ebpf.protocols.base import ConnInfo, NeutralSpan, positional_maker

from otel_ebpf.correlate import joiner

# the modules, not the package's functions of the same names
parse = importlib.import_module("otel_ebpf.protocols.http1.parse")
spans = importlib.import_module("otel_ebpf.protocols.http1.spans")
stitch = importlib.import_module("otel_ebpf.protocols.http1.stitch")


def _fields(obj) -> dict:
    return {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}


@pytest.mark.parametrize("maker, cls", [
    (parse._new_request, parse.HTTPRequest), (parse._new_response, parse.HTTPResponse),
    (spans._new_span, NeutralSpan), (stitch._new_record, stitch.HTTPRecord),
    (joiner._new_request, joiner.Request),
])
def test_the_makers_build_what_the_constructors_build(maker, cls):
    names = maker.__code__.co_varnames[: maker.__code__.co_argcount]
    values = [object() for _ in names]
    made, built = maker(*values), cls(**dict(zip(names, values, strict=True)))
    assert type(made) is cls
    assert _fields(made) == _fields(built)
    again = maker(*values)
    for f in dataclasses.fields(cls):  # mutable defaults are not shared
        if f.default_factory is not dataclasses.MISSING and f.name not in names:
            assert getattr(again, f.name) is not getattr(made, f.name)


def test_only_plain_dataclasses_and_known_fields():
    with pytest.raises(TypeError):
        positional_maker(ConnInfo, ("pid",))  # frozen
    with pytest.raises(TypeError):
        positional_maker(NeutralSpan, ("no_such_field",))
    with pytest.raises(TypeError):
        positional_maker(NeutralSpan, ("name",))  # kind, times and conn have no default
