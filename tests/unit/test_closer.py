"""Closing constrained JSON within the budget: what the closer steers, and what it reports as cut (no model)."""

from __future__ import annotations

import numpy as np

from ryzenai_core.generation.closer import Closer, TokenIndex
from ryzenai_core.prompt.completion import Alternative, Shape

FRAMING = b'{"name": "f", "arguments": '
TOKENS = [FRAMING, b'{"n":', b"123", b"}", b'{"q":"', b"ab", b'"', b'"}', b"cd"]


class Generator:
    """The logits a closer reads and biases (the token the model writes comes from the test's script)."""

    def __init__(self) -> None:
        self.steered: list[int] = []

    def get_logits(self) -> np.ndarray:
        return np.zeros((1, len(TOKENS)), dtype=np.float32)

    def set_logits(self, logits: np.ndarray) -> None:
        self.steered = [int(i) for i in np.nonzero(logits[0])[0]]


def run(schema: dict, script: list[bytes], budget: int) -> tuple[list[str], list[list[bytes]]]:
    """The values reported cut, and the tokens steered onto at each step, for a model that writes ``script``."""
    shape = Shape((Alternative(schema, prefix=FRAMING, suffix=b"}", label="f"),), reserve=2)
    generator = Generator()
    closer = Closer(shape, TokenIndex(TOKENS), budget, generator)
    steered = []
    for n, data in enumerate(script):
        generator.steered = []
        closer.before_step(n)
        steered.append([TOKENS[i] for i in generator.steered])
        closer.feed(TOKENS.index(data))
    return closer.cut_values(), steered


def test_steering_onto_the_framing_alone_cuts_nothing():
    """A tight budget steers from the first token (the framing counts its bytes); the model then writes its value."""
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    cut, steered = run(schema, [FRAMING, b'{"n":', b"123", b"}", b"}"], budget=20)
    assert steered[0] == [FRAMING] and steered[2:] == [[], [], []]  # steered, then released
    assert cut == []  # was ["f"]: the whole value counted as filled although the model wrote it


def test_a_string_closed_by_a_steered_token_is_cut():
    schema = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}
    cut, steered = run(schema, [FRAMING, b'{"q":"', b"ab", b'"}', b"}"], budget=8)
    assert b'"}' in steered[3] and cut == ["f(q)"]


def test_a_string_the_model_goes_on_writing_is_not_cut():
    """Steered while the cost looked tight, released before the quote: the string is the model's."""
    schema = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}
    cut, steered = run(schema, [FRAMING, b'{"q":"', b"ab", b"cd", b'"', b"}", b"}"], budget=14)
    assert steered[0] and steered[3] == []
    assert cut == []
