"""protocols.base.positional_maker builds what the dataclass's own constructor builds: the
same fields, the same defaults, a fresh object for each mutable default; its compiled
implementation (otel_ebpf/_fast/maker.c) builds what its Python one (python_maker) does."""

from __future__ import annotations

import dataclasses
import importlib

import pytest
from otel_ebpf.protocols.base import (
    ConnInfo,
    Measurement,
    NeutralSpan,
    positional_maker,
    python_maker,
)

from otel_ebpf import _fast
from otel_ebpf.correlate import joiner

# the modules, not the package's functions of the same names
parse = importlib.import_module("otel_ebpf.protocols.http1.parse")
spans = importlib.import_module("otel_ebpf.protocols.http1.spans")
stitch = importlib.import_module("otel_ebpf.protocols.http1.stitch")
llm_spans = importlib.import_module("otel_ebpf.protocols.llm.spans")
h2parse = importlib.import_module("otel_ebpf.protocols.http2.parse")
h2spans = importlib.import_module("otel_ebpf.protocols.http2.spans")
h2stitch = importlib.import_module("otel_ebpf.protocols.http2.stitch")


def _fields(obj) -> dict:
    return {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}


def _plain(obj) -> dict:
    """_fields, a default factory's object without __eq__ (gRPC Messages) by its slots."""
    return {k: (type(v), [getattr(v, s) for s in v.__slots__])
            if type(v).__eq__ is object.__eq__ and hasattr(v, "__slots__") else v
            for k, v in _fields(obj).items()}


MAKERS = [
    (parse._new_request, parse.HTTPRequest), (parse._new_response, parse.HTTPResponse),
    (parse._whole_request, parse.HTTPRequest), (parse._whole_response, parse.HTTPResponse),
    (spans._new_span, NeutralSpan), (stitch._new_record, stitch.HTTPRecord),
    (joiner._new_request, joiner.Request),
    (llm_spans._measurement, Measurement),  # frozen: set past its __setattr__
    (h2spans._new_span, NeutralSpan), (h2stitch._new_record, h2stitch.H2Record),
]
# classes with a __post_init__ whose fields the caller passes (post_init_sets)
POST_INIT_MAKERS = [
    (h2parse._new_request, h2parse.H2Request), (h2parse._new_response, h2parse.H2Response),
]


@pytest.mark.parametrize("maker, cls", MAKERS)
def test_the_makers_build_what_the_constructors_build(maker, cls):
    names = maker.names
    values = [object() for _ in names]
    made, built = maker(*values), cls(**dict(zip(names, values, strict=True)))
    assert type(made) is cls
    assert _fields(made) == _fields(built)
    again = maker(*values)
    for f in dataclasses.fields(cls):  # mutable defaults are not shared
        if f.default_factory is not dataclasses.MISSING and f.name not in names:
            assert getattr(again, f.name) is not getattr(made, f.name)


@pytest.mark.parametrize("maker, cls", POST_INIT_MAKERS)
def test_a_maker_passes_what_post_init_would_set(maker, cls):
    """H2Message.__post_init__ sets exchange to the stream id; the maker is given both."""
    names = maker.names
    values = {n: object() for n in names}
    values["exchange"] = values["stream_id"] = 7
    made = maker(*(values[n] for n in names))
    built = cls(**{n: v for n, v in values.items() if n != "exchange"})
    assert type(made) is cls
    assert _plain(made) == _plain(built)
    assert made.headers is not maker(*(values[n] for n in names)).headers  # a fresh default


def test_only_plain_dataclasses_and_known_fields():
    with pytest.raises(TypeError):
        positional_maker(ConnInfo, ("pid",))  # role, fd, generation... have no default
    with pytest.raises(TypeError):
        positional_maker(NeutralSpan, ("no_such_field",))
    with pytest.raises(TypeError):
        positional_maker(NeutralSpan, ("name",))  # kind, times and conn have no default
    with pytest.raises(TypeError):  # a __post_init__ whose fields are not named
        positional_maker(h2parse.H2Response, ("stream_id",))
    with pytest.raises(TypeError):  # what __post_init__ sets must be passed
        positional_maker(h2parse.H2Response, ("stream_id",), post_init_sets=("exchange",))


def _plan(cls, names):
    plan = []
    for f in dataclasses.fields(cls):
        if f.name in names:
            plan.append((f.name, 0, names.index(f.name)))
        elif f.default is not dataclasses.MISSING:
            plan.append((f.name, 1, f.default))
        else:
            plan.append((f.name, 2, f.default_factory))
    return plan


@pytest.mark.skipif(_fast.maker is None, reason="the C extensions are not built (pure Python)")
@pytest.mark.parametrize("maker, cls", MAKERS + POST_INIT_MAKERS)
def test_the_compiled_maker_builds_what_the_python_one_builds(maker, cls):
    assert type(maker) is _fast.maker.Maker  # the agent's own makers take the C path
    reference = python_maker(cls, maker.names, _plan(cls, maker.names))
    values = [object() for _ in maker.names]
    made, expected = maker(*values), reference(*values)
    assert type(made) is type(expected) is cls
    assert _plain(made) == _plain(expected)  # a factory's fresh value equals its twin
    again = maker(*values)
    for f in dataclasses.fields(cls):  # factories called for each object, as Python does
        if f.default_factory is not dataclasses.MISSING and f.name not in maker.names:
            assert getattr(made, f.name) is not getattr(again, f.name)
    with pytest.raises(TypeError):
        maker(*values[:-1])
    with pytest.raises(TypeError):
        maker(*values, None)
    with pytest.raises(TypeError):
        maker(*values[:-1], **{maker.names[-1]: values[-1]})


@pytest.mark.parametrize("make", [
    lambda: positional_maker(Measurement, ("instrument", "value")),
    lambda: python_maker(Measurement, ("instrument", "value"),
                         _plan(Measurement, ("instrument", "value"))),
])
def test_a_frozen_class_is_built_as_its_constructor_builds_it(make):
    maker = make()
    made = maker("m", 0.5)
    assert made == Measurement("m", 0.5) and type(made) is Measurement
    assert made.attributes == {} and made.attributes is not maker("m", 0.5).attributes
    with pytest.raises(dataclasses.FrozenInstanceError):  # frozen afterwards, as before
        made.value = 1.0
