"""first_wanting: which layer takes a request, asked of each layer once per method and
target, and a table of answers that stays bounded."""

from otel_ebpf.protocols import layers as layers_mod
from otel_ebpf.protocols.layers import first_wanting
from otel_ebpf.protocols.testing import EchoLayer


class Counting(EchoLayer):
    """Wants the targets under its prefix; counts how often it was asked."""

    def __init__(self, prefix: str) -> None:
        super().__init__()
        self.prefix, self.asked = prefix, 0

    def wants(self, method: str, target: str) -> bool:
        self.asked += 1
        return method == "POST" and target.startswith(self.prefix)


def test_the_first_layer_that_wants_a_request_is_chosen_and_remembered():
    a, b = Counting("/a"), Counting("/b")
    layers = (a, b)
    for _ in range(3):
        assert first_wanting(layers, "POST", "/b/1") is b
        assert first_wanting(layers, "GET", "/b/1") is None
        assert first_wanting(layers, "POST", "/a/1") is a
    assert (a.asked, b.asked) == (3, 2)  # once per method and target, not per request
    assert first_wanting((b, a), "POST", "/a/1") is a  # another set of layers: asked anew
    assert first_wanting((), "POST", "/a/1") is None


def test_targets_that_never_repeat_keep_the_table_bounded():
    layer = Counting("/x")
    for i in range(3 * layers_mod._WANTED_MAX):
        assert first_wanting((layer,), "POST", f"/x/{i}") is layer
    assert len(layers_mod._WANTED) <= layers_mod._WANTED_MAX
    assert layer.asked == 3 * layers_mod._WANTED_MAX
