"""Which texts an encoder treats as blank (the empty text): pure, no model."""

from __future__ import annotations

import pytest

from ryzenai_core.embeddings.embedding import blanks, is_blank


@pytest.mark.parametrize(
    "text",
    ["", " ", "\n\t\r\x0c\x0b", "\x00", "\ufeff", "\u200b", "\u200c\u200d\u2060", "\u00a0\u3000", "\x00\ufeff \u200b"],
)
def test_empty_whitespace_and_invisible_characters_are_blank(text):
    assert is_blank(text)


@pytest.mark.parametrize("text", ["a", " a ", "\x00x", "\u200b.", "\U0001f600", "\u0301", "-"])
def test_a_visible_character_anywhere_is_not_blank(text):
    assert not is_blank(text)


def test_blanks_lists_the_indices_of_blank_texts():
    assert blanks(["a", "", "\ufeff", "b", " \x00"]) == [1, 2, 4]
    assert blanks([]) == []
