"""Grammars that always close within the budget, on real OGA guidance."""

from __future__ import annotations

import json

import pytest

from conftest import TINY_LLAMA, TINY_QWEN3
from ryzenai_core import ChatMessage, Engine, InvalidRequestError
from ryzenai_core.options import validated_options
from ryzenai_core.prompt.structured import bound_schema, json_schema_guidance, tool_call_guidance

SCHEMA = {
    "type": "object",
    "properties": {
        "title": {"type": "string"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "score": {"type": "number"},
        "meta": {"type": "object", "properties": {"n": {"type": "integer"}, "note": {"type": "string"}}},
        "kind": {"type": "string", "enum": ["a", "b"]},
    },
    "required": ["title", "tags", "score", "meta", "kind"],
}
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "multiply",
            "description": "a times b",
            "parameters": {
                "type": "object",
                "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                "required": ["a", "b"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "search",
            "description": "web search",
            "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
        },
    },
]
MSGS = [ChatMessage("user", "Fill the form.")]


def test_bound_schema_bounds_every_free_form_value():
    b = bound_schema(SCHEMA, 1000)
    assert b["properties"]["title"]["maxLength"] >= 8
    assert b["properties"]["tags"]["maxItems"] == 8
    assert b["properties"]["tags"]["items"]["maxLength"] == b["properties"]["title"]["maxLength"]
    assert "maxLength" not in b["properties"]["kind"]
    assert b["properties"]["score"]["multipleOf"] == 0.0001
    assert b["properties"]["meta"]["additionalProperties"] is False
    assert b["x-guidance"] == {"whitespace_flexible": False}
    assert SCHEMA["properties"]["title"] == {"type": "string"}  # the caller's schema is untouched


def test_small_budgets_shorten_arrays_before_strings():
    b = bound_schema(SCHEMA, 200)
    assert b["properties"]["tags"]["maxItems"] < 8 and b["properties"]["title"]["maxLength"] >= 8


def test_tighter_bounds_are_kept():
    b = bound_schema({"type": "object", "properties": {"s": {"type": "string", "maxLength": 2}}}, 500)
    assert b["properties"]["s"]["maxLength"] == 2


def test_budget_too_small_is_a_clear_error():
    with pytest.raises(
        InvalidRequestError, match=r"max_new_tokens=20 is too small.*raise max_new_tokens to at least [0-9]+"
    ) as info:
        bound_schema(SCHEMA, 20)
    bound_schema(SCHEMA, int(str(info.value).rsplit(" ", 1)[1]))  # the budget the error names is enough


@pytest.mark.parametrize("model", [TINY_QWEN3, TINY_LLAMA], ids=["qwen3", "llama"])
@pytest.mark.parametrize("budget", [150, 300, 1000])
def test_bounded_schema_output_parses_within_the_budget(model, budget):
    e = Engine.get(model, execution="inline")
    c = e.generate(
        MSGS, validated_options(max_new_tokens=budget, temperature=0, guidance=json_schema_guidance(SCHEMA, budget))
    )
    data = json.loads(c.text)
    assert set(data) == {"title", "tags", "score", "meta", "kind"}
    assert c.usage.completion_tokens <= budget
    # A value that ran into a bound the library set is reported, never silent: "length" names it.
    assert (c.finish_reason, bool(c.cut)) in (("stop", False), ("length", True))


@pytest.mark.parametrize("model", [TINY_QWEN3, TINY_LLAMA], ids=["qwen3", "llama"])
@pytest.mark.parametrize("name", [None, "multiply", "search"])
def test_forced_tool_call_in_the_family_format(model, name):
    """The call comes back parsed; a value cut to close within the budget (or at the bound the library set
    from it) is named, and the finish reason is then "length", as OpenAI reports output cut short."""
    e = Engine.get(model, execution="inline")
    c = e.generate(
        MSGS, validated_options(max_new_tokens=96, temperature=0, tools=TOOLS, tool_choice=name or "required")
    )
    assert len(c.tool_calls) == 1 and c.usage.completion_tokens <= 96
    assert c.finish_reason == ("length" if c.cut else "tool_calls")
    call = c.tool_calls[0]
    assert all(cut.startswith(f"{call.name}(") for cut in c.cut)
    assert name is None or call.name == name
    if call.name == "multiply":
        assert isinstance(call.arguments["a"], int) and isinstance(call.arguments["b"], int)
    else:
        assert isinstance(call.arguments["query"], str)


def test_tool_choice_must_name_a_bound_tool():
    with pytest.raises(InvalidRequestError, match="'divide', which is not a bound tool; bound tools: multiply, search"):
        tool_call_guidance("qwen3", TOOLS, 64, "divide")


def test_family_without_tool_format():
    with pytest.raises(InvalidRequestError, match="no tool-call format"):
        tool_call_guidance("gemma3", TOOLS, 64)


def test_forced_call_budget_counts_the_call_wrapper():
    with pytest.raises(
        InvalidRequestError, match=r"max_new_tokens=20 is too small for a forced call to 'search'.*at least"
    ):
        tool_call_guidance("qwen3", TOOLS, 20, "search")


def _tool(name: str, description: str, properties: dict, required: list[str]) -> dict:
    """A tool as LangChain's ``convert_to_openai_tool`` writes it for a ``@tool`` function."""
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {"type": "object", "properties": properties, "required": required},
        },
    }


CALL_TOOLS = {
    "weather": _tool(
        "get_weather",
        "Get the weather forecast for a city.",
        {"city": {"type": "string"}, "days": {"type": "integer"}},
        ["city", "days"],
    ),
    "magic": _tool(
        "magic_function", "Applies a magic function to an input.", {"input": {"type": "integer"}}, ["input"]
    ),
    "search": _tool("search", "Search the web.", {"query": {"type": "string"}}, ["query"]),
    "selections": _tool(
        "pick",
        "Pick some of the numbered choices, and say why.",
        {"choices": {"type": "array", "items": {"type": "integer"}}, "reason": {"type": "string"}},
        ["choices", "reason"],
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("model", [TINY_QWEN3, TINY_LLAMA], ids=["qwen3", "llama"])
@pytest.mark.parametrize("which", sorted(CALL_TOOLS))
def test_forced_call_is_refused_before_generating_or_completes(model, which):
    """A budget the check passes holds the whole call, whatever the model samples; a smaller one is
    refused before generating, naming a budget that passes (tools as LangChain writes them, several seeds)."""
    tools = [CALL_TOOLS[which]]
    name = tools[0]["function"]["name"]
    e = Engine.get(model, execution="inline")
    family = e.template.family
    need = None
    for budget in range(8, 200, 4):
        try:
            tool_call_guidance(family, tools, budget, count_tokens=e.count_text)
        except InvalidRequestError as exc:
            assert "too small for a forced call" in str(exc) and "before" not in str(exc)
            need = int(str(exc).rsplit("at least ", 1)[1])
            continue
        break
    assert need is not None and budget >= need  # small budgets were refused, and the named one passes
    tool_call_guidance(family, tools, need, count_tokens=e.count_text)
    with pytest.raises(InvalidRequestError, match="too small for a forced call"):  # the call's own path refuses it
        e.generate(MSGS, validated_options(max_new_tokens=need - 1, tools=tools, tool_choice=name))
    for budget in (need, need + 7, need + 40):
        for seed in range(6):
            c = e.generate(
                MSGS,
                validated_options(max_new_tokens=budget, temperature=1.0, seed=seed, tools=tools, tool_choice=name),
            )
            # The call always comes back whole; one the budget cut says so ("length", the values named).
            assert [t.name for t in c.tool_calls] == [name], (budget, seed, c.text)
            assert c.finish_reason == ("length" if c.cut else "tool_calls") and c.usage.completion_tokens <= budget


def test_json_mode_object_closes_within_the_budget():
    from ryzenai_core.prompt.structured import json_object_guidance

    e = Engine.get(TINY_QWEN3, execution="inline")
    for budget in (16, 64, 200):
        c = e.generate(
            MSGS, validated_options(max_new_tokens=budget, temperature=0, guidance=json_object_guidance(budget))
        )
        assert isinstance(json.loads(c.text), dict) and c.usage.completion_tokens <= budget
    with pytest.raises(InvalidRequestError, match="too small for JSON mode"):
        json_object_guidance(4)


TUPLE_AND_DICT = {
    "type": "object",
    "properties": {
        "pair": {
            "type": "array",
            "prefixItems": [{"type": "integer"}, {"type": "string"}],
            "minItems": 2,
            "maxItems": 2,
        },
        "scores": {"type": "object", "additionalProperties": {"type": "integer"}},
        "anything": {"type": "object"},
    },
    "required": ["pair", "scores", "anything"],
}


def test_tuples_keep_their_length_and_dict_keys_are_bounded():
    b = bound_schema(TUPLE_AND_DICT, 400)
    assert b["properties"]["pair"]["maxItems"] == 2 == b["properties"]["pair"]["minItems"]
    scores = b["properties"]["scores"]
    assert scores["additionalProperties"] is False and scores["maxProperties"] <= 8
    (pattern,) = scores["patternProperties"]
    assert pattern.startswith("^[^") and pattern.endswith("}$")


@pytest.mark.parametrize("budget", [200, 400, 800])
def test_tuple_and_dict_output_closes_within_the_budget_whatever_the_model_samples(budget):
    e = Engine.get(TINY_QWEN3, execution="inline")
    g = json_schema_guidance(TUPLE_AND_DICT, budget)
    for seed in range(5):
        c = e.generate(MSGS, validated_options(max_new_tokens=budget, temperature=1.0, seed=seed, guidance=g))
        data = json.loads(c.text)
        assert len(data["pair"]) == 2 and isinstance(data["pair"][0], int) and isinstance(data["pair"][1], str)
        assert all(isinstance(v, int) for v in data["scores"].values())
