"""The shortest completion of constrained JSON, from any byte of it (pure Python, no model)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, Field

from ryzenai_core.prompt.completion import BOUND_MARK, Alternative, Follower, Shape, fresh_value


class Item(BaseModel):
    name: str
    qty: int = Field(ge=1)


class Order(BaseModel):
    title: str
    note: str | None = None
    tags: list[str]
    items: list[Item] = Field(min_length=1)
    total: float
    paid: bool
    kind: str = Field(json_schema_extra={"enum": ["a", "bb"]})
    extra: dict[str, int] = {}


SCHEMA = Order.model_json_schema()
TEXT = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)
ORDERS = st.builds(
    Order,
    title=TEXT,
    note=st.one_of(st.none(), TEXT),
    tags=st.lists(TEXT, max_size=3),
    items=st.lists(st.builds(Item, name=TEXT, qty=st.integers(1, 10**6)), min_size=1, max_size=2),
    total=st.floats(-1e6, 1e6, allow_nan=False),
    paid=st.booleans(),
    kind=st.sampled_from(["a", "bb"]),
    extra=st.dictionaries(TEXT.filter(bool), st.integers(-99, 99), max_size=2),
)


def compact(order: Order, *, ascii_only: bool) -> bytes:
    return json.dumps(order.model_dump(), separators=(",", ":"), ensure_ascii=ascii_only).encode()


@settings(max_examples=40, deadline=None)
@given(order=ORDERS, ascii_only=st.booleans())
def test_every_prefix_completes_to_a_valid_value(order, ascii_only):
    data = compact(order, ascii_only=ascii_only)
    follower = Follower(Shape((Alternative(SCHEMA),)))
    for cut in range(len(data) + 1):
        follower.feed(data[cut - 1 : cut] if cut else b"")
        done = follower.completion()
        assert done is not None, data[:cut]
        text, cost, _ = done
        assert cost >= len(text)
        Order.model_validate(json.loads(data[:cut] + text))


def test_the_cut_names_the_open_string_and_the_members_it_fills():
    follower = Follower(Shape((Alternative(SCHEMA),)))
    follower.feed(b'{"title":"A long ti')
    text, _, cut = follower.completion()
    assert text.startswith(b'"') and b'"items":[{"name":"","qty":1}]' in text
    names = [name for name, _ in cut]
    assert names[0] == "title" and {"tags", "items", "total", "paid", "kind"} <= set(names)
    # Each is cut where its part of the text is written: the string at its closing quote, a member
    # once its minimal value is written.
    ends = dict(cut)
    assert ends["title"] == 1 and text[: ends["items"]].endswith(b'"items":[{"name":"","qty":1}]')


def test_a_tool_call_framing_is_part_of_the_completion():
    args = {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}
    call = Alternative(
        args, prefix=b'<tool_call>\n{"name": "search", "arguments": ', suffix=b"}\n</tool_call>", label="search"
    )
    answer = Alternative({"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]})
    follower = Follower(Shape((call, answer)))
    assert follower.completion()[0] == b'{"a":0}'  # the cheaper form while both are open
    follower.feed(b"<tool_call>\n{")
    assert follower.completion()[0] == b'"name": "search", "arguments": {"query":""}}\n</tool_call>'
    follower.feed(b'"name": "search", "arguments": {"query":"x')
    text, _, cut = follower.completion()
    assert text == b'"}}\n</tool_call>' and cut == [("search(query)", 1)]


def test_a_value_not_started_is_filled_only_once_it_is_written_whole():
    args = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    follower = Follower(Shape((Alternative(args, prefix=b'{"name": "f", "arguments": ', suffix=b"}", label="f"),)))
    text, _, cut = follower.completion()
    assert text == b'{"name": "f", "arguments": {"n":0}}' and cut == [("f", len(text) - 1)]  # the framing cuts nothing


def test_strings_that_reach_a_bound_the_library_set_are_cut_and_the_callers_are_not():
    schema = {
        "type": "object",
        "properties": {
            "ours": {"type": "string", "maxLength": 3, BOUND_MARK: True},
            "theirs": {"type": "string", "maxLength": 3},
        },
        "required": ["ours", "theirs"],
    }
    follower = Follower(Shape((Alternative(schema),)))
    follower.feed('{"ours":"aé\\n","theirs":"abc"}'.encode())
    assert follower.bound_cuts() == ["ours"]


@pytest.mark.parametrize(
    ("schema", "value"),
    [
        ({"type": "integer", "minimum": 5}, b"5"),
        ({"type": "number", "exclusiveMaximum": 0}, b"-1"),
        ({"anyOf": [{"type": "string"}, {"type": "null"}]}, b'""'),
        ({"type": "array", "items": {"type": "boolean"}, "minItems": 2}, b"[false,false]"),
        ({"enum": ["long", "s"]}, b'"s"'),
        ({"$ref": "#/$defs/X"}, b'{"k":null}'),
    ],
)
def test_fresh_values(schema, value):
    defs = {"X": {"type": "object", "properties": {"k": {"type": "null"}}, "required": ["k"]}}
    assert fresh_value(schema, defs)[0] == value


def test_a_free_form_key_is_cut_where_it_closes_and_a_members_name_where_its_value_is_filled():
    free = {"type": "object", "patternProperties": {"^.{1,40}$": {"type": "integer"}}, "additionalProperties": False}
    follower = Follower(Shape((Alternative(free),)))
    follower.feed(b'{"ab')
    assert follower.completion()[0] == b'":0}' and follower.completion()[2] == [("ab", 1)]
    follower = Follower(Shape((Alternative(SCHEMA),)))
    follower.feed(b'{"tit')
    text, _, cut = follower.completion()
    assert text.startswith(b'le":""') and cut[0] == ("title", len(b'le":""'))
