"""A call's options and bounds at their edges: tool_choice given as a flag, the seed under the runtime's
name, an option given twice with the same value, the output a budget grants at the window's edge,
and the string bound of structured output against the budget it was made for.
"""

from __future__ import annotations

import copy

import pytest

from ryzenai_core import InvalidRequestError
from ryzenai_core.options import GenerationOptions, resolve_search, tool_choice_from
from ryzenai_core.package.budget import ContextBudget
from ryzenai_core.prompt.structured import bound_schema, output_bound
from ryzenai_core.vocabulary import call_options

TOOL = {"type": "function", "function": {"name": "now", "parameters": {"type": "object", "properties": {}}}}


@pytest.mark.parametrize(("given", "word"), [(True, "required"), (False, "none"), (None, "auto")])
def test_tool_choice_as_a_flag_is_its_word(given, word):
    assert tool_choice_from(given) == word
    assert GenerationOptions(tools=[TOOL], tool_choice=given).tool_choice == word


def test_the_seed_reaches_the_runtime_as_random_seed():
    search = resolve_search(GenerationOptions(temperature=0.7, seed=7), {})
    assert search["random_seed"] == 7 and "seed" not in search
    assert "random_seed" not in resolve_search(GenerationOptions(temperature=0.7), {})


@pytest.mark.parametrize(
    ("given", "option", "value"),
    [
        ({"max_tokens": 1000, "max_new_tokens": int("1000")}, "max_new_tokens", 1000),
        ({"stop": ["END"], "stop_sequences": ["END"]}, "stop", ["END"]),
        ({"seed": 12345, "random_seed": int("12345")}, "seed", 12345),
    ],
)
def test_an_option_given_twice_with_the_same_value_is_taken_once(given, option, value):
    assert call_options("ChatRyzenAI", given) == {option: value}


def test_an_option_given_twice_with_different_values_is_refused():
    with pytest.raises(InvalidRequestError, match="max_tokens"):
        call_options("ChatRyzenAI", {"max_tokens": 10, "max_new_tokens": 20})


@pytest.mark.parametrize("window", [2, 512, 4096])
def test_the_output_a_budget_grants_leaves_the_prompt_one_token(window):
    budget = ContextBudget(window=window, prompt_limit=window - 1)
    for asked in (window - 1, window, window + 1, 10**6):
        assert budget.output_tokens(asked) == window - 1
    assert budget.output_tokens(1) == 1


OBJECT = {"type": "object", "properties": {"summary": {"type": "string"}}, "required": ["summary"]}


@pytest.mark.parametrize("budget", [48, 100, 256, 1024])
@pytest.mark.parametrize("overhead", [0, 9])
def test_a_bound_strings_longest_value_fits_the_budget_and_one_more_character_would_not(budget, overhead):
    bounded = bound_schema(OBJECT, budget, overhead=overhead)
    # the longest value the bound admits, with the call's framing, leaves the end of the turn its token
    assert output_bound(bounded) + overhead <= budget - 1
    wider = copy.deepcopy(bounded)
    wider["properties"]["summary"]["maxLength"] += 1
    assert output_bound(wider) + overhead > budget - 1  # the widest bound that fits, not a smaller one
