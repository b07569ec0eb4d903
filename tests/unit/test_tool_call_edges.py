"""Tool calls at their edges: a call without arguments, a block cut before its closing tag, the text
around a call, and which families have a call format (in the parser and in a package's template).
"""

from __future__ import annotations

import pytest

from conftest import TINY_GEMMA3, TINY_LLAMA, TINY_QWEN3
from ryzenai_core.package.folder import ModelPackage
from ryzenai_core.prompt.formats import has_tool_calls, parse_tool_calls
from ryzenai_core.prompt.templates import ChatTemplate


@pytest.mark.parametrize("family", ["qwen3", "chatml"])
def test_a_call_to_a_tool_without_arguments_is_a_call(family):
    content, calls = parse_tool_calls('<tool_call>\n{"name": "now"}\n</tool_call>', family)
    assert content == ""
    assert [(c.name, c.arguments) for c in calls] == [("now", {})]


@pytest.mark.parametrize("tail", ["", "\n", "\n  "])
def test_a_last_block_cut_before_its_closing_tag_is_still_a_call(tail):
    text = 'Checking.\n<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}' + tail
    content, calls = parse_tool_calls(text, "qwen3")
    assert [(c.name, c.arguments) for c in calls] == [("add", {"a": 1, "b": 2})]
    assert content == "Checking."


def test_the_text_around_a_call_is_the_content_without_the_blocks_whitespace():
    text = '\nLet me look that up.\n<tool_call>\n{"name": "search", "arguments": {"q": "x"}}\n</tool_call>\n'
    content, calls = parse_tool_calls(text, "qwen3")
    assert content == "Let me look that up."
    assert [c.name for c in calls] == ["search"]


@pytest.mark.parametrize(
    ("family", "calls"),
    [("llama3", True), ("qwen3", True), ("chatml", True), ("gemma3", False), ("plain", False)],
)
def test_which_families_have_a_tool_call_format(family, calls):
    assert has_tool_calls(family) is calls


@pytest.mark.parametrize(("folder", "calls"), [(TINY_LLAMA, True), (TINY_QWEN3, True), (TINY_GEMMA3, False)])
def test_a_packages_template_calls_tools_where_its_family_has_a_format(folder, calls):
    template = ChatTemplate.for_package(ModelPackage.open(folder))
    assert template.calls_tools is calls
