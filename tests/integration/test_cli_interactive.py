"""``ryzenai-llm chat`` driven as a user types: the prompt loop, its commands and its errors."""

from __future__ import annotations

import builtins
import re
import shutil
from collections.abc import Iterable
from typing import Any

import pytest

from conftest import LONG_PROMPT, TINY_QWEN3
from ryzenai_cli.main import main

STATUS = re.compile(r"\[(\d+) prompt \+ (\d+) new = (\d+)/4096 tokens, no buckets.*?, length")


def typed(monkeypatch: pytest.MonkeyPatch, lines: Iterable[Any]) -> list[str]:
    """Feed ``lines`` to ``input()``; an exception in the list is raised as the user's key press.

    Returns the prompts shown, one per ``input()`` call.
    """
    feed = iter(lines)
    prompts: list[str] = []

    def fake_input(prompt: str = "") -> str:
        prompts.append(prompt)
        line = next(feed)
        if isinstance(line, BaseException) or (isinstance(line, type) and issubclass(line, BaseException)):
            raise line
        return line

    monkeypatch.setattr(builtins, "input", fake_input)
    return prompts


def chat(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(["chat", str(TINY_QWEN3), "--max-new-tokens", "3", "--temperature", "0", *argv])
    return code, capsys.readouterr().out


def flat(out: str) -> str:
    """The output with the console's line wrapping undone."""
    return " ".join(out.split())


def answers(out: str) -> list[str]:
    """What followed each ``ai> `` up to its line end."""
    return re.findall(r"ai> (.*)\n", out)


@pytest.mark.parametrize("leave", ["/exit", "/quit", EOFError], ids=["exit", "quit", "ctrl-d"])
def test_chat_answers_then_leaves(capsys, monkeypatch, leave):
    prompts = typed(monkeypatch, ["hi", leave])
    code, out = chat(capsys)
    assert code == 0
    assert prompts == ["you> ", "you> "]  # nothing read after leaving
    assert out.startswith("tiny-qwen3: plain, window 4096, prompt limit 4095. /help for commands")
    assert len(answers(out)) == 1
    (status,) = STATUS.findall(flat(out))
    assert int(status[1]) == 3 and int(status[0]) + 3 == int(status[2])


def test_chat_prompt_commands_and_keys(capsys, monkeypatch):
    prompts = typed(
        monkeypatch,
        ["", "   ", KeyboardInterrupt, "/help", "/image", "/system Be brief.", "hi", "/reset", "hi", "/exit"],
    )
    code, out = chat(capsys)
    assert code == 0
    assert len(prompts) == 10  # empty lines and Ctrl-C at the prompt just ask again
    assert "/reset clear the history · /system TEXT set the system prompt · /image PATH attach" in flat(out)
    assert "[usage: /image PATH]" in out
    assert "[system prompt set]" in out and "[history cleared]" in out
    # Only the two messages went to the model; after /reset the prompt is as short as the first.
    first, second = STATUS.findall(flat(out))
    assert first[0] == second[0]
    assert len(answers(out)) == 2


def test_chat_shows_an_engine_error_in_red_and_keeps_going(capsys, monkeypatch):
    monkeypatch.setenv("FORCE_COLOR", "1")  # rich colours the output as on a terminal
    monkeypatch.setenv("COLUMNS", "400")
    typed(monkeypatch, [f"{LONG_PROMPT} {LONG_PROMPT}", "hi", EOFError])
    code, out = chat(capsys)
    assert code == 0
    red = re.search(
        r"\x1b\[31m(error: prompt of (\d+) tokens is over this package's prompt limit of 4095[^\x1b]*)", out
    )
    assert red, out
    assert int(red.group(2)) > 4096 and "drop_oldest" in red.group(1)
    assert STATUS.search(out)  # the next message is answered


def test_chat_drops_old_turns_when_the_history_outgrows_the_window(capsys, monkeypatch):
    typed(monkeypatch, ["hi", LONG_PROMPT, LONG_PROMPT, "/exit"])
    code, out = chat(capsys)
    assert code == 0
    statuses = [s for s in re.findall(r"\[[^\]]*\]", flat(out)) if " prompt + " in s]
    assert len(statuses) == 3
    assert "dropped" not in statuses[0] + statuses[1]
    dropped = re.search(r"^\[(\d+) prompt .*, length, (\d+) old turns dropped\]$", statuses[2])
    assert dropped, statuses[2]
    assert 3000 < int(dropped.group(1)) <= 4096 - 3 and int(dropped.group(2)) >= 3  # hi and its answer went too


def test_chat_think_option_reaches_the_chat_template(capsys, monkeypatch):
    prompt_tokens = {}
    for flag in ("--think", "--no-think"):
        typed(monkeypatch, ["hi", "/exit"])
        code, out = chat(capsys, flag)
        assert code == 0
        prompt_tokens[flag] = int(STATUS.search(flat(out)).group(1))
    # Qwen3's template closes an empty <think></think> block in the prompt when thinking is off.
    assert prompt_tokens["--no-think"] > prompt_tokens["--think"]


def test_chat_shows_reasoning_dimmed(capsys, monkeypatch, tmp_path):
    # A thinking-only Qwen3 template opens <think> in the prompt: what the model writes next is reasoning.
    model = tmp_path / "tiny-qwen3-thinking"
    shutil.copytree(TINY_QWEN3, model)
    tpl = model / "chat_template.jinja"
    source = tpl.read_text(encoding="utf-8")
    assert "{{- '<|im_start|>assistant\\n' }}" in source
    tpl.write_text(source.replace("{{- '<|im_start|>assistant\\n' }}", "{{- '<|im_start|>assistant\\n<think>\\n' }}"))
    typed(monkeypatch, ["hi", "/exit"])
    code = main(["chat", str(model), "--max-new-tokens", "3", "--temperature", "0"])
    out = capsys.readouterr().out
    assert code == 0
    (answer,) = answers(out)
    assert re.fullmatch(r"(\x1b\[2m[^\x1b]+\x1b\[0m)+", answer), repr(answer)  # all of it dim, no answer text


@pytest.mark.parametrize(
    ("argv", "message"), [(["--temperature", "-1"], "temperature"), (["--max-new-tokens", "0"], "max_new_tokens")]
)
def test_chat_bad_option_is_refused_before_the_first_prompt(capsys, monkeypatch, argv, message):
    prompts = typed(monkeypatch, ["hi", "/exit"])
    code = main(["chat", str(TINY_QWEN3), *argv])
    captured = capsys.readouterr()
    assert code == 2 and prompts == []
    assert captured.err.startswith("error: ") and message in captured.err
