"""A call's options, declared once: their checks, the words a call may use for them, and what the prompt says.

Pure logic, no model: ryzenai_core.options, ryzenai_core.vocabulary and the format instruction of
ryzenai_core.request.
"""

from __future__ import annotations

import json
import pickle

import pytest

from ryzenai_core import InvalidRequestError
from ryzenai_core.messages import ChatMessage
from ryzenai_core.options import OPTIONS, GenerationOptions, Guidance, ResponseFormat, resolve_search, validated_options
from ryzenai_core.request import format_instruction, instructed
from ryzenai_core.vocabulary import ALIASES, UNSUPPORTED, call_options, option_name

LANGCHAIN_NAMES = {"max_new_tokens": "max_tokens", "template_vars": "model_kwargs"}
SCHEMA = {
    "title": "Answer",
    "type": "object",
    "properties": {
        "city": {"title": "City", "type": "string"},
        "title": {"title": "Title", "type": "string"},
        "n": {"title": "Number of inhabitants", "type": "integer"},
        "home_town": {"title": "Home Town", "type": "string", "description": "where they were born"},
    },
    "required": ["city", "title", "n"],
}


# ---------------------------------------------------------------------- one type, its values checked
def test_values_are_kept_in_one_form():
    options = GenerationOptions(
        stop="END",
        tools=[{"name": "f"}],
        tool_choice={"type": "function", "function": {"name": "f"}},
        max_new_tokens=5.0,
        temperature=1,
    )
    assert options.stop == ("END",) and options.tools == ({"name": "f"},) and options.tool_choice == "f"
    guided = GenerationOptions(guidance={"type": "json_schema", "data": {"type": "integer"}})
    assert guided.guidance == Guidance(type="json_schema", data='{"type": "integer"}')
    assert (options.max_new_tokens, options.temperature) == (5, 1.0)
    assert isinstance(options.max_new_tokens, int) and isinstance(options.temperature, float)
    assert GenerationOptions(response_format={"type": "json_object"}).response_format == ResponseFormat("json_object")


@pytest.mark.parametrize(
    ("given", "words"),
    [
        ({"max_new_tokens": 0}, "max_tokens=0: Input should be greater than or equal to 1"),
        ({"max_new_tokens": 2.5}, "max_tokens=2.5: Input should be an integer, got a number with a fractional part"),
        ({"max_new_tokens": "5"}, "max_tokens='5': Input should be an integer"),
        ({"temperature": True}, "temperature=True: Input should be a number"),
        ({"temperature": float("nan")}, "temperature=nan: Input should be greater than or equal to 0"),
        ({"top_p": 0}, "top_p=0: Input should be greater than 0"),
        ({"top_p": 1.5}, "top_p=1.5: Input should be less than or equal to 1"),
        ({"kv_reuse": "yes"}, "kv_reuse='yes': Input should be True, False or None"),
        ({"stop": 5}, "stop=5: Input should be a list of strings"),
        ({"stop": ["a", "\ud800"]}, "holds a lone surrogate"),
        ({"tools": ["f"]}, "each tool should be a dict (OpenAI function format), got str"),
        ({"template_vars": {"tools": []}}, "model_kwargs={'tools': []}: 'tools' cannot be a chat-template variable"),
        ({"guidance": {"type": "regex"}}, "guidance={'type': 'regex'}: Input should be a Guidance or a dict"),
        (
            {"guidance": {"type": "sql", "data": "x"}},
            "guidance type 'sql': use 'json_schema', 'regex' or 'lark_grammar'",
        ),
        ({"tool_choice": "required"}, "tool_choice='required' requires a tool call but no tools were given"),
    ],
)
def test_a_bad_value_names_the_option_as_the_caller_does_the_value_and_the_limit(given, words):
    with pytest.raises(InvalidRequestError, match="^invalid generation options: ") as info:
        GenerationOptions(**given, option_names=LANGCHAIN_NAMES)
    assert words in str(info.value)


def test_every_bad_value_is_named_at_once_and_the_rules_over_several_come_after():
    with pytest.raises(InvalidRequestError) as info:
        validated_options(top_k=-1, seed=-2)
    assert "top_k=-1" in str(info.value) and "seed=-2" in str(info.value)
    with pytest.raises(InvalidRequestError, match="one way only; it got guidance and tool_choice='f'"):
        validated_options(guidance={"type": "regex", "data": "a"}, tools=[{"name": "f"}], tool_choice="f")


def test_options_cross_a_process_boundary_and_compare_without_the_callers_names():
    options = validated_options(max_new_tokens=3, stop=["x"], option_names=LANGCHAIN_NAMES)
    copy = pickle.loads(pickle.dumps(options))
    assert copy == options == validated_options(max_new_tokens=3, stop="x")
    assert copy.called("max_new_tokens") == "max_tokens"
    assert options.replace(max_new_tokens=4).max_new_tokens == 4
    with pytest.raises(InvalidRequestError, match="max_tokens=0"):  # the caller's names go with the copy
        options.replace(max_new_tokens=0)


def test_validated_options_names_the_option_a_wrong_name_means():
    with pytest.raises(InvalidRequestError, match=r"temprature=1: not an option \(did you mean 'temperature'\?\)"):
        validated_options(temprature=1)
    with pytest.raises(InvalidRequestError, match=r"max_tokens=4: not an option \(did you mean 'max_new_tokens'\?\)"):
        validated_options(max_tokens=4)
    with pytest.raises(InvalidRequestError, match="do_sample=True is a generation option .* temperature=0 for greedy"):
        validated_options(do_sample=True)


# ---------------------------------------------------------------------- the words of a call
def test_a_call_names_an_option_by_its_name_the_faces_name_or_an_alias():
    assert call_options("X", {"max_tokens": 3, "reasoning": False, "random_seed": 1, "stop_sequences": ["a"]}) == {
        "max_new_tokens": 3,
        "enable_thinking": False,
        "seed": 1,
        "stop": ["a"],
    }
    assert call_options("X", {"model_kwargs": {"a": 1}, "timeout": None}, LANGCHAIN_NAMES, ("model_kwargs",)) == {
        "model_kwargs": {"a": 1},
        "timeout": None,  # no limit, as for the setting
    }
    assert call_options("X", {"temperature": None, "max_tokens": 3, "max_new_tokens": 3}) == {"max_new_tokens": 3}
    assert {option_name(word, "X", {}) for word in ALIASES} <= set(OPTIONS)


def test_a_call_gives_one_option_once():
    with pytest.raises(InvalidRequestError, match="max_tokens is given twice: max_tokens=3 and max_new_tokens=4"):
        call_options("X", {"max_tokens": 3, "max_new_tokens": 4}, LANGCHAIN_NAMES)


@pytest.mark.parametrize("word", sorted(UNSUPPORTED))
def test_an_option_the_core_does_not_have_is_refused_with_what_to_use_in_the_faces_words(word):
    with pytest.raises(InvalidRequestError, match=rf"^{word}=1 is a generation option ChatRyzenAI does not have: "):
        call_options("ChatRyzenAI", {word: 1}, LANGCHAIN_NAMES)
    UNSUPPORTED[word].format_map({o: o for o in OPTIONS})  # every option it points to is one the core has
    with pytest.raises(InvalidRequestError) as info:
        option_name(word, "ChatRyzenAI", LANGCHAIN_NAMES, 1, where="model_kwargs")
    assert str(info.value).startswith(f"model_kwargs[{word!r}]=1 is a generation option")
    assert "max_new_tokens" not in str(info.value)  # LangChain's name for it


def test_an_unknown_keyword_names_the_closest_in_the_faces_words_and_all_of_them():
    with pytest.raises(InvalidRequestError) as info:
        call_options("ChatRyzenAI", {"max_new_token": 1}, LANGCHAIN_NAMES, ("model_kwargs",))
    message = str(info.value)
    assert message.startswith(
        "ChatRyzenAI does not take the keyword argument(s) max_new_token (did you mean 'max_tokens'?)"
    )
    assert "accepted per call: " in message and "model_kwargs" in message and "timeout" in message


def test_sampling_is_the_packages_unless_a_temperature_says():
    package = {"do_sample": True, "temperature": 0.6}
    assert resolve_search(GenerationOptions(), package)["do_sample"] is True
    assert resolve_search(GenerationOptions(temperature=0), package)["do_sample"] is False
    assert resolve_search(GenerationOptions(temperature=0.7), {"do_sample": False})["do_sample"] is True
    assert resolve_search(GenerationOptions(), {})["do_sample"] is False


# ---------------------------------------------------------------------- the answer's form, said in the prompt
def test_a_schema_is_said_compact_without_the_titles_that_restate_a_name():
    text = format_instruction(GenerationOptions(response_format={"type": "json_schema", "schema": SCHEMA}))
    assert text is not None and text.startswith("Answer in JSON matching this schema: {")
    said = json.loads(text.split(": ", 1)[1])
    assert said["properties"]["city"] == {"type": "string"}
    assert said["properties"]["title"] == {"type": "string"}  # a property named title keeps its name
    assert said["properties"]["n"]["title"] == "Number of inhabitants"  # a title that says more stays
    assert said["properties"]["home_town"] == {"type": "string", "description": "where they were born"}
    assert said["title"] == "Answer" and '", "' not in text and '": ' not in text.split(": ", 1)[1]
    assert (
        format_instruction(GenerationOptions(response_format={"type": "json_object"})) == "Answer with one JSON object."
    )
    assert format_instruction(GenerationOptions()) is None
    assert format_instruction(GenerationOptions(guidance={"type": "regex", "data": "a"})) is None


def test_the_instruction_ends_the_last_user_message():
    shaped = GenerationOptions(response_format={"type": "json_object"})
    plain = [ChatMessage("system", "Be brief."), ChatMessage("user", "Name a city.")]
    assert instructed(plain, GenerationOptions()) is plain
    said = instructed(plain, shaped)
    assert [m.content for m in said] == ["Be brief.", "Name a city.\n\nAnswer with one JSON object."]
    assert plain[1].content == "Name a city."  # the caller's messages are not changed
    parts = [ChatMessage("user", [{"type": "image", "url": "x.png"}, {"type": "text", "text": "What is it?"}])]
    assert instructed(parts, shaped)[0].content[-1] == {"type": "text", "text": "\n\nAnswer with one JSON object."}
    after_tool = [ChatMessage("user", "Add."), ChatMessage("tool", "3", tool_call_id="c")]
    assert instructed(after_tool, shaped)[-1] == ChatMessage("user", "Answer with one JSON object.")


def test_on_an_agents_turn_the_instruction_says_a_tool_may_come_first_and_stays_with_the_question():
    """Tools the model may call and a response format: every turn keeps the instruction where the first had it."""
    tool = {"type": "function", "function": {"name": "lookup", "parameters": {"type": "object", "properties": {}}}}
    agent = GenerationOptions(tools=[tool], response_format={"type": "json_object"})
    said = "You may call a tool first; your final answer must be one JSON object"
    assert format_instruction(agent) == said
    assert format_instruction(agent.replace(tool_choice="none")) == "Answer with one JSON object."
    question = [ChatMessage("system", "Be brief."), ChatMessage("user", "Weather in Paris?")]
    turn = [*question, ChatMessage("assistant", "", tool_calls=[]), ChatMessage("tool", "sunny", tool_call_id="c")]
    first, second = instructed(question, agent), instructed(turn, agent)
    assert first[1].content == second[1].content == f"Weather in Paris?\n\n{said}"
    assert second[2:] == turn[2:]  # no user turn between the tool's result and the answer
    # Without tools to call, the answer comes next: the instruction follows the tool's result.
    assert instructed(turn, agent.replace(tool_choice="none"))[-1] == ChatMessage(
        "user", "Answer with one JSON object."
    )
