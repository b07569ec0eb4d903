"""The parts a session is made of, each on its own: why the token loop stops, the call's state,
the unread-stream policy, and a prepared prompt's tools normalised once."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

from conftest import TINY_LLAMA
from ryzenai_core import ChatMessage, Engine, GenerationError, GenerationTimeoutError
from ryzenai_core.generation import prompt_builder
from ryzenai_core.generation import scheduler as scheduler_module
from ryzenai_core.generation.call import CallControl, CallSpec, Cancellation, Phase
from ryzenai_core.generation.scheduler import ReadWatch
from ryzenai_core.generation.stop import StopChecker
from ryzenai_core.generation.streaming import FinishReason, OutputParser
from ryzenai_core.options import validated_options

PLAN = SimpleNamespace(max_new_tokens=3, requested_new_tokens=3, window=64)


class FakeGenerator:
    def __init__(self, done: bool = False) -> None:
        self.done = done

    def is_done(self) -> bool:
        return self.done


def checker(control: CallControl | None = None, done: bool = False, **parser: object) -> StopChecker:
    control = control or CallControl()
    return StopChecker(control, FakeGenerator(done), frozenset({7}), PLAN, OutputParser(**parser))  # type: ignore[arg-type]


def test_the_stop_checker_names_each_reason() -> None:
    assert checker().before_step(0) is None
    assert checker().before_step(3) == FinishReason.LENGTH
    assert checker(done=True).before_step(0) == FinishReason.STOP
    cancelled = CallControl()
    cancelled.cancel.set()
    assert checker(cancelled).before_step(0) == FinishReason.CANCELLED
    assert checker().after_token(7) == FinishReason.STOP and checker().after_token(8) is None
    parser = OutputParser(stop=["END"])
    stops = StopChecker(CallControl(), FakeGenerator(), frozenset({7}), PLAN, parser)  # type: ignore[arg-type]
    parser.feed("and END")
    assert stops.after_text() == FinishReason.STOP
    assert checker().finish_reason(FinishReason.STOP) == FinishReason.STOP


def test_a_stop_after_tool_calls_is_tool_calls() -> None:
    parser = OutputParser()
    stop = StopChecker(CallControl(), FakeGenerator(), frozenset({7}), PLAN, parser)  # type: ignore[arg-type]
    parser.tool_calls.append(object())  # type: ignore[arg-type]
    assert (
        stop.finish_reason(FinishReason.STOP) == FinishReason.TOOL_CALLS
        and stop.finish_reason(FinishReason.LENGTH) == FinishReason.LENGTH
    )


def test_the_stop_checker_times_out_with_the_tokens_generated() -> None:
    control = CallControl(CallSpec(timeout=0.0, budget_name="max_tokens"))
    control.start_clock()
    control.enter(Phase.GENERATING)
    time.sleep(0.01)
    with pytest.raises(GenerationTimeoutError, match="after 2 new tokens and was cancelled.* lower max_tokens") as info:
        checker(control).before_step(2)
    assert info.value.phase == "generating"


def test_constrained_output_cut_by_the_limit_is_refused_unless_complete_json() -> None:
    guidance = SimpleNamespace(type="json_schema")
    stop = StopChecker(CallControl(), FakeGenerator(), frozenset(), PLAN, OutputParser(), guidance)  # type: ignore[arg-type]
    decoder = SimpleNamespace(decode_all=lambda ids: '{"a": 1}' if ids else '{"a"')
    stop.check_complete(FinishReason.LENGTH, decoder, [1])  # type: ignore[arg-type]
    stop.check_complete(FinishReason.STOP, decoder, [])  # type: ignore[arg-type]
    with pytest.raises(GenerationError, match="was not complete after 3 tokens"):
        stop.check_complete(FinishReason.LENGTH, decoder, [])  # type: ignore[arg-type]


def test_phases_are_the_strings_callbacks_saw_before() -> None:
    seen: list[str] = []
    control = CallControl(on_phase=seen.append)
    for phase in (Phase.PREPARING, Phase.PREFILL, Phase.GENERATING):
        control.enter(phase)
    assert seen == ["preparing", "prefill", "generating"]
    assert [f"{p}" for p in seen] == seen and all(type(p) is Phase for p in seen)
    assert control.timeout_error().phase == "generating"


def test_a_paused_deadline_moves_by_the_pause() -> None:
    cancel = Cancellation()
    cancel.start(10.0)
    before = cancel.deadline
    assert before is not None
    with cancel.paused():
        assert cancel.deadline is None and not cancel.expired()
        time.sleep(0.05)
    assert cancel.deadline is not None and cancel.deadline - before >= 0.05
    unstarted = Cancellation()
    with unstarted.paused():
        pass
    assert unstarted.deadline is None


def test_an_unread_stream_is_preempted_once_after_abandon_after(monkeypatch) -> None:
    monkeypatch.setattr(scheduler_module, "ABANDON_AFTER", 0.05)
    watch = ReadWatch()
    assert not watch.preempt()  # never handed a chunk
    watch.handed()
    assert not watch.preempt()  # just now
    time.sleep(0.06)
    watch.reading()
    assert not watch.preempt()  # its caller is back
    watch.handed()
    time.sleep(0.06)
    assert watch.preempt() and watch.preempted
    assert not watch.preempt()  # told once


def test_tools_are_normalised_once_per_call_while_old_turns_are_dropped(monkeypatch) -> None:
    calls: list[int] = []
    real = prompt_builder.normalize_tools

    def counted(tools):  # type: ignore[no-untyped-def]
        calls.append(len(tools))
        return real(tools)

    monkeypatch.setattr(prompt_builder, "normalize_tools", counted)
    engine = Engine.get(TINY_LLAMA, execution="inline")
    tool = {"type": "function", "function": {"name": "lookup", "parameters": {"type": "object", "properties": {}}}}
    msgs = [ChatMessage("user" if i % 2 == 0 else "assistant", f"message number {i} " * 8) for i in range(801)]
    out = engine.generate(msgs, validated_options(max_new_tokens=2, overflow="drop_oldest", tools=[tool]), timeout=60)
    assert out.dropped_messages > 0
    assert calls == [1]
