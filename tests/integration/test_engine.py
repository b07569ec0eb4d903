"""The core engine on real OGA and the fixture models: both execution modes."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import json
import os
import signal
import threading
import time

import pytest

from conftest import LASTING_MODEL, LASTING_TOKENS, REPLICAS, TINY_LLAMA, TINY_QWEN3
from ryzenai_core import (
    ContextWindowExceededError,
    GenerationError,
    InvalidRequestError,
    LfsPointerError,
    ModelNotFoundError,
    RuntimeNotAvailableError,
)
from ryzenai_core.engine.engine import Engine
from ryzenai_core.engine.worker import chunk_message
from ryzenai_core.errors import GenerationTimeoutError, WorkerDiedError
from ryzenai_core.generation import scheduler as scheduler_module
from ryzenai_core.generation.streaming import Chunk, Timings, Usage
from ryzenai_core.ipc import Delta, Output
from ryzenai_core.messages import ChatMessage, ToolCall
from ryzenai_core.options import GenerationOptions, resolve_search, validated_options

GREEDY = dict(temperature=0)
MSGS = [ChatMessage("system", "You are helpful."), ChatMessage("user", "What is the prompt limit of the NPU?")]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "multiply",
            "description": "multiply two integers",
            "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}},
        },
    }
]


@pytest.fixture(scope="module", params=["inline", "process"])
def engine(request):
    e = Engine.get(TINY_QWEN3, execution=request.param)
    yield e


@pytest.fixture(scope="module")
def llama():
    return Engine.get(TINY_LLAMA, execution="process")


def opts(**kw):
    return validated_options(**{**GREEDY, **kw})


def test_max_new_tokens_means_new_tokens(engine):
    c = engine.generate(MSGS, opts(max_new_tokens=7))
    assert c.usage.completion_tokens == 7 and c.finish_reason == "length"
    assert c.usage.prompt_tokens == engine.count_tokens(MSGS)
    assert c.usage.total_tokens == c.usage.prompt_tokens + 7
    assert c.plan.max_new_tokens == 7 and c.plan.prompt_tokens == c.usage.prompt_tokens
    assert c.timings.time_to_first_token > 0 and c.timings.decode_tokens_per_second > 0


def test_streamed_text_equals_decode_of_streamed_ids(engine):
    chunks = list(engine.stream(MSGS, opts(max_new_tokens=40)))
    ids = [i for c in chunks for i in c.token_ids]
    assert len(ids) == 40
    assert "".join(c.text for c in chunks) == engine.decode(ids)
    whole = engine.generate(MSGS, opts(max_new_tokens=40, kv_reuse=False))
    assert whole.token_ids == ids and whole.text == engine.decode(ids)
    assert [c.finish_reason for c in chunks][-1] == "length"
    assert all(c.finish_reason is None for c in chunks[:-1])


def test_only_a_chunk_of_text_and_ids_alone_travels_as_a_delta():
    """A chunk with any other field set crosses the pipe whole (a field added later included)."""
    assert chunk_message(3, Chunk("a", token_ids=[1])) == Delta(3, "a", [1])
    for f in dataclasses.fields(Chunk):
        if f.name in ("text", "token_ids"):
            continue
        value = {
            "reasoning": "r",
            "tool_calls": [ToolCall("f", {}, "c")],
            "finish_reason": "stop",
            "usage": Usage(1, 1),
            "timings": Timings(),
            "plan": object(),
            "dropped_messages": 1,
            "stop_sequence": "\n",
            "provider": "RyzenAI",
            "cut": ["answer"],
            "adapter": "sql",
        }.get(f.name)
        assert value is not None, f"Chunk.{f.name} is new: check it in worker.chunk_message, and give it a value here"
        chunk = Chunk("a", token_ids=[1], **{f.name: value})
        assert chunk_message(3, chunk) == Output(3, chunk), f.name


def test_greedy_is_deterministic_and_stream_equals_generate(engine):
    a = engine.generate(MSGS, opts(max_new_tokens=25, kv_reuse=False))
    b = "".join(c.text for c in engine.stream(MSGS, opts(max_new_tokens=25, kv_reuse=False)))
    assert a.text == b


def test_seeded_sampling_reproduces(engine):
    o = validated_options(max_new_tokens=20, temperature=0.9, top_k=50, seed=7)
    assert engine.generate(MSGS, o).text == engine.generate(MSGS, o).text


def test_stop_string_cuts_and_never_leaks(engine):
    full = engine.generate(MSGS, opts(max_new_tokens=40, kv_reuse=False)).text
    stop = full[10:13]
    assert stop.strip()
    c = engine.generate(MSGS, opts(max_new_tokens=40, stop=[stop], kv_reuse=False))
    assert c.finish_reason == "stop"
    assert stop not in c.text
    assert c.text == full[: full.index(stop)]


def test_guidance_eos_gives_stop(engine):
    c = engine.generate(MSGS, opts(max_new_tokens=30, guidance={"type": "regex", "data": "yes|no"}))
    assert c.text in ("yes", "no") and c.finish_reason == "stop"


def test_json_schema_output_always_parses(engine):
    schema = {
        "type": "object",
        "properties": {
            "city": {"type": "string", "maxLength": 12},
            "days": {"type": "integer", "minimum": 0, "maximum": 9},
        },
        "required": ["city", "days"],
        "additionalProperties": False,
        "x-guidance": {"whitespace_flexible": False},
    }
    c = engine.generate(MSGS, opts(max_new_tokens=64, guidance={"type": "json_schema", "data": schema}))
    data = json.loads(c.text)
    assert set(data) == {"city", "days"} and 0 <= data["days"] <= 9


def test_unfinished_constrained_output_is_an_error_not_truncated_json(engine):
    schema = {"type": "object", "properties": {"text": {"type": "string", "minLength": 50}}, "required": ["text"]}
    with pytest.raises(GenerationError, match="not complete after 5 tokens"):
        engine.generate(MSGS, opts(max_new_tokens=5, guidance={"type": "json_schema", "data": schema}))


def test_bad_grammar_is_a_clear_error(engine):
    with pytest.raises(InvalidRequestError, match="could not be compiled"):
        engine.generate(MSGS, opts(max_new_tokens=5, guidance={"type": "lark_grammar", "data": "start: ((("}))


def test_qwen3_reasoning_is_split_out(engine):
    c = engine.generate(
        MSGS, opts(max_new_tokens=40, guidance={"type": "regex", "data": "<think>\nstep one\n</think>\n\nfour"})
    )
    assert (c.reasoning, c.text, c.finish_reason) == ("step one", "four", "stop")


def test_thinking_off_is_rendered_by_the_template(engine):
    prompt = engine.render(MSGS, validated_options(enable_thinking=False))
    assert prompt.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")


def test_qwen3_tool_call_end_to_end(engine):
    forced = '<tool_call>\n\\{"name": "multiply", "arguments": \\{"a": 3, "b": 12\\}\\}\n</tool_call>'
    c = engine.generate(MSGS, opts(max_new_tokens=60, tools=TOOLS, guidance={"type": "regex", "data": forced}))
    assert c.finish_reason == "tool_calls" and c.text == ""
    assert [(t.name, t.arguments) for t in c.tool_calls] == [("multiply", {"a": 3, "b": 12})]
    assert '"name": "multiply"' in engine.render(MSGS, validated_options(tools=TOOLS))


def test_llama_json_tool_call_end_to_end(llama):
    forced = '\\{"name": "multiply", "parameters": \\{"a": 3, "b": 12\\}\\}'
    c = llama.generate(MSGS, opts(max_new_tokens=60, tools=TOOLS, guidance={"type": "regex", "data": forced}))
    assert c.finish_reason == "tool_calls"
    assert c.tool_calls[0].arguments == {"a": 3, "b": 12}


def test_kv_reuse_is_identical_to_a_cold_run(engine):
    engine.backend  # noqa: B018
    msgs = [ChatMessage("system", "You are helpful. " + "Answer in one short sentence. " * 12), MSGS[1]]
    first = engine.generate(msgs, opts(max_new_tokens=12, kv_reuse=True))
    turn2 = [*msgs, ChatMessage("assistant", first.text), ChatMessage("user", "And the window?")]
    warm = engine.generate(turn2, opts(max_new_tokens=12, kv_reuse=True))
    cold = engine.generate(turn2, opts(max_new_tokens=12, kv_reuse=False))
    assert warm.text == cold.text
    assert warm.timings.reused_prompt_tokens > first.usage.prompt_tokens // 2
    assert cold.timings.reused_prompt_tokens == 0


def test_prompt_over_the_limit_is_a_typed_error(copy_package):
    folder = copy_package(TINY_LLAMA, "small-window")
    cfg = json.loads((folder / "genai_config.json").read_text())
    cfg["search"]["max_length"] = 128
    (folder / "genai_config.json").write_text(json.dumps(cfg))
    e = Engine.get(folder, execution="inline")
    long = [
        ChatMessage("system", "Be brief."),
        *[ChatMessage("user" if i % 2 == 0 else "assistant", f"turn {i} " + "word " * 12) for i in range(9)],
    ]
    with pytest.raises(ContextWindowExceededError) as info:
        e.generate(long, opts(max_new_tokens=4))
    assert info.value.limit == 127 and info.value.prompt_tokens > 128
    c = e.generate(long, opts(max_new_tokens=4, overflow="drop_oldest"))
    assert c.usage.prompt_tokens <= 127
    assert c.finish_reason == "length"
    with pytest.raises(ContextWindowExceededError, match="Dropping old turns did not help"):
        e.generate([ChatMessage("system", "x " * 200), ChatMessage("user", "hi")], opts(overflow="drop_oldest"))


def test_output_is_clamped_to_the_window_not_an_error(copy_package):
    folder = copy_package(TINY_LLAMA, "tiny-window")
    cfg = json.loads((folder / "genai_config.json").read_text())
    cfg["search"]["max_length"] = 100
    (folder / "genai_config.json").write_text(json.dumps(cfg))
    e = Engine.get(folder, execution="inline")
    c = e.generate([ChatMessage("user", "hi")], opts(max_new_tokens=500))
    assert c.plan.clamped and c.usage.prompt_tokens + c.usage.completion_tokens == 100
    assert c.finish_reason == "length"


def test_ryzenai_package_needs_the_ryzenai_runtime():
    e = Engine.get(REPLICAS / "Llama-3.2-1B_rai_1.8.0_npu_4K", execution="inline")
    with pytest.raises(
        RuntimeNotAvailableError, match=r"needs onnxruntime-genai with AMD's Ryzen AI EP library.*provider='cpu'"
    ):
        e.generate(MSGS, opts(max_new_tokens=3))


@pytest.mark.parametrize(
    "name",
    [
        "Llama-3.2-1B_rai_1.8.0_npu_4K",
        "Qwen3-4B_rai_1.8.0_npu_4K",
        "Llama-3.2-1B_rai_1.8.0_hybrid",
        "SmolLM2-135M-Instruct-onnx-ryzenai-1.7-hybrid",
        "Gemma-3-4b_rai_1.8.0_npu_16K",
    ],
)
def test_replicas_run_on_the_cpu_provider(name):
    e = Engine.get(REPLICAS / name, provider="cpu", execution="inline")
    c = e.generate(MSGS, opts(max_new_tokens=5))
    assert c.usage.completion_tokens == 5
    assert c.plan.prefill_bucket == (e.budget.prefill_bucket(c.usage.prompt_tokens))


def test_gemma_vision_replica_generates_text_on_the_cpu_provider():
    """The multimodal replica (decoder on inputs_embeds, embedding model) answers text prompts,
    also past the 512-token sliding window of its decoder and with a max_length below it."""
    e = Engine.get(REPLICAS / "Gemma-3-4b_rai_1.8.0_npu_16K", provider="cpu", execution="inline")
    assert e.package.has_vision and e.package.mode.value == "token-fusion"
    short = e.generate([ChatMessage("user", "hi")], opts(max_new_tokens=3))
    assert short.usage.completion_tokens == 3 and short.usage.prompt_tokens + 3 < 512
    long = e.generate([ChatMessage("user", "tell me about the fox " * 150)], opts(max_new_tokens=4))
    assert long.usage.prompt_tokens > 512 and long.usage.completion_tokens == 4
    again = e.generate([ChatMessage("user", "tell me about the fox " * 150)], opts(max_new_tokens=4))
    assert again.text == long.text  # top_k 1 in the package's search defaults


def test_replica_sampling_defaults_come_from_the_package():
    e = Engine.get(REPLICAS / "Llama-3.2-1B_rai_1.8.0_npu_4K", provider="cpu", execution="inline")
    search = resolve_search(GenerationOptions(), dict(e.package.search))
    assert (search["temperature"], search["top_k"], search["top_p"], search["do_sample"]) == (0.6, 50, 0.9, True)
    mine = resolve_search(GenerationOptions(temperature=0.2, top_k=5), dict(e.package.search))
    assert (mine["temperature"], mine["top_k"], mine["top_p"]) == (0.2, 5, 0.9)
    assert resolve_search(GenerationOptions(temperature=0), {"do_sample": True})["do_sample"] is False


def test_old_layouts_say_which_runtime_they_need():
    e = Engine.get(REPLICAS / "Qwen-2.5-1.5B-Instruct-onnx-ryzenai-npu", provider="cpu", execution="inline")
    with pytest.raises(RuntimeNotAvailableError, match="1.3-1.6 custom-ops layout"):
        e.generate(MSGS)


def test_lfs_pointer_weights_say_git_lfs_pull():
    e = Engine.get(REPLICAS / "Llama-3.2-1B_rai_1.8.0_npu_4K-lfs-pointers", provider="cpu", execution="process")
    with pytest.raises(LfsPointerError, match="git lfs pull"):
        e.generate(MSGS)


def test_bad_options_name_the_value():
    with pytest.raises(InvalidRequestError, match=r"temperature=-1.*greater than or equal to 0"):
        validated_options(temperature=-1)
    with pytest.raises(InvalidRequestError, match=r"top_p=1.5"):
        validated_options(top_p=1.5)
    with pytest.raises(InvalidRequestError, match=r"max_new_tokens=0"):
        validated_options(max_new_tokens=0)
    with pytest.raises(InvalidRequestError, match=r"temprature"):
        validated_options(temprature=0.5)


def test_empty_message_list(engine):
    with pytest.raises(InvalidRequestError, match="no messages|empty"):
        engine.generate([], opts())


# ----------------------------------------------------------------------------- concurrency
def test_threads_are_served_one_at_a_time_in_order():
    e = Engine.get(TINY_QWEN3, execution="process")
    prompts = [[ChatMessage("user", f"question number {i}")] for i in range(8)]
    o = opts(max_new_tokens=12, kv_reuse=False)
    expected = [e.generate(p, o).text for p in prompts]
    results: dict[tuple[int, int], str] = {}

    def worker(t):
        for k in range(20):
            i = (t + k) % 8
            results[(t, k)] = e.generate(prompts[i], o).text

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert len(results) == 160
    for (t, k), text in results.items():
        assert text == expected[(t + k) % 8]


def test_concurrent_async_streams_never_interleave():
    e = Engine.get(TINY_QWEN3, execution="process")
    prompts = [[ChatMessage("user", f"async question {i}")] for i in range(16)]
    o = opts(max_new_tokens=15, kv_reuse=False)
    expected = [e.generate(p, o).text for p in prompts]

    async def one(p):
        return "".join([c.text async for c in e.astream(p, o)])

    async def main():
        return await asyncio.gather(*(one(p) for p in prompts))

    assert asyncio.run(main()) == expected


def test_closing_a_stream_frees_the_model(engine):
    o = opts(max_new_tokens=400, kv_reuse=False)
    it = engine.stream(MSGS, o)
    next(it)
    it.close()
    assert engine.generate(MSGS, opts(max_new_tokens=5)).usage.completion_tokens == 5


def test_cancelling_an_async_task_frees_the_model():
    e = Engine.get(TINY_QWEN3, execution="process")

    async def main():
        got = []

        async def consume():
            async for c in e.astream(MSGS, opts(max_new_tokens=3000, kv_reuse=False)):
                got.append(c)

        task = asyncio.create_task(consume())
        while not got:
            await asyncio.sleep(0.005)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        t0 = time.perf_counter()
        c = await e.agenerate(MSGS, opts(max_new_tokens=5))
        return c, time.perf_counter() - t0

    c, _ = asyncio.run(main())
    assert c.usage.completion_tokens == 5


@pytest.mark.parametrize("execution", ["inline", "process"])
def test_timeout_cancels_and_raises(execution):
    engine = Engine.get(LASTING_MODEL, execution=execution)  # an answer of seconds: the timeout comes first
    with pytest.raises(GenerationTimeoutError):
        for _ in engine.stream(MSGS, opts(max_new_tokens=LASTING_TOKENS, kv_reuse=False), timeout=0.05):
            pass
    assert engine.generate(MSGS, opts(max_new_tokens=3)).usage.completion_tokens == 3


def test_worker_killed_mid_call_is_an_error_and_the_next_call_works(copy_package):
    e = Engine.get(copy_package(LASTING_MODEL, "killable"), execution="process")
    e.load()
    pid = e.worker_pid()
    it = e.stream(MSGS, opts(max_new_tokens=LASTING_TOKENS, kv_reuse=False))  # still going when killed
    next(it)
    os.kill(pid, signal.SIGKILL)
    with pytest.raises(WorkerDiedError, match="exited"):
        for _ in it:
            pass
    c = e.generate(MSGS, opts(max_new_tokens=4))
    assert c.usage.completion_tokens == 4
    assert e.worker_pid() != pid


def test_raw_prompt_bypasses_the_template(engine):
    from ryzenai_core.messages import RawPrompt

    ids = engine.encode(engine.render(MSGS))
    by_ids = engine.generate(RawPrompt(token_ids=ids), opts(max_new_tokens=8, kv_reuse=False))
    by_messages = engine.generate(MSGS, opts(max_new_tokens=8, kv_reuse=False))
    assert by_ids.text == by_messages.text and by_ids.usage.prompt_tokens == len(ids)
    by_text = engine.generate(RawPrompt(text="Once upon a time"), opts(max_new_tokens=3))
    assert by_text.usage.prompt_tokens == len(engine.encode("Once upon a time"))
    with pytest.raises(InvalidRequestError, match="outside the vocabulary"):
        engine.generate(RawPrompt(token_ids=[5, 999999]), opts())
    with pytest.raises(InvalidRequestError, match="either text or token_ids"):
        RawPrompt()


def test_dropped_turns_are_reported(copy_package):
    folder = copy_package(TINY_LLAMA, "drop-report")
    cfg = json.loads((folder / "genai_config.json").read_text())
    cfg["search"]["max_length"] = 160
    (folder / "genai_config.json").write_text(json.dumps(cfg))
    e = Engine.get(folder, execution="inline")
    turns = [ChatMessage("user" if i % 2 == 0 else "assistant", f"turn {i} " + "word " * 12) for i in range(9)]
    c = e.generate(turns, opts(max_new_tokens=4, overflow="drop_oldest"))
    assert c.dropped_messages > 0
    assert c.usage.prompt_tokens == e.count_tokens(turns[c.dropped_messages :])


def test_session_options_reach_the_runtime():
    e = Engine.get(TINY_LLAMA, execution="inline", session_options={"log_severity_level": 3})
    assert e.generate(MSGS, opts(max_new_tokens=2)).usage.completion_tokens == 2
    bad = Engine.get(TINY_LLAMA, execution="inline", session_options={"enable_profiling": False})
    with pytest.raises(InvalidRequestError, match=r"rejected the session options.*enable_profiling"):
        bad.generate(MSGS, opts(max_new_tokens=2))


def test_a_name_is_looked_up_again_when_it_names_another_folder(copy_package, monkeypatch, tmp_path):
    """Engine.get remembers where a name led, but not past the folder it names: a relative
    name from another working folder, a symlink pointed elsewhere, a folder that is gone."""
    one, two = copy_package(TINY_LLAMA, "one"), copy_package(TINY_QWEN3, "two")
    (one / "m").symlink_to(one, target_is_directory=True)
    (two / "m").symlink_to(two, target_is_directory=True)
    monkeypatch.chdir(one)
    first = Engine.get("m", execution="inline")
    assert Engine.get("m", execution="inline") is first is Engine.get(one, execution="inline")
    assert first.package.path.resolve() == one.resolve()
    monkeypatch.chdir(two)
    second = Engine.get("m", execution="inline")
    assert second is not first and second.package.path.resolve() == two.resolve()
    # an engine taken out of the registry is not handed out again
    Engine.registry.forget(lambda slot: slot == (second.key, "inline"), Engine)
    assert Engine.get("m", execution="inline") is not second
    link = tmp_path / "current-model"
    link.symlink_to(one, target_is_directory=True)
    assert Engine.get(link, execution="inline") is first
    link.unlink()
    link.symlink_to(two, target_is_directory=True)
    assert Engine.get(link, execution="inline").package.path.resolve() == two.resolve()
    link.unlink()
    with pytest.raises(ModelNotFoundError):
        Engine.get(link, execution="inline")


def test_guidance_the_runtime_rejects_while_generating_is_typed_and_the_next_call_works(engine):
    """This regex compiles, then the runtime fails committing the first token (its lexer gives up)."""
    cold = engine.generate(MSGS, opts(max_new_tokens=6, kv_reuse=False), timeout=60).text
    for _ in range(2):
        with pytest.raises(InvalidRequestError, match="rejected the regex guidance while generating"):
            engine.generate(MSGS, opts(max_new_tokens=6, guidance={"type": "regex", "data": "a{99999999}"}), timeout=30)
        again = engine.generate(MSGS, opts(max_new_tokens=6, kv_reuse=False), timeout=30)
        assert again.text == cold and again.usage.completion_tokens == 6


def test_inline_generations_always_run_on_a_thread_of_their_own(monkeypatch):
    """With or without a timeout, the caller only waits on its queue (with its deadline)."""
    e = Engine.get(TINY_LLAMA, execution="inline")
    session = e.inline_session()
    ran_in: list[str] = []
    real = session.stream

    def recorded(*args, **kwargs):
        ran_in.append(threading.current_thread().name)
        return real(*args, **kwargs)

    monkeypatch.setattr(session, "stream", recorded)
    plain = [c.text for c in e.stream(MSGS, opts(max_new_tokens=6, kv_reuse=False))]
    timed = [c.text for c in e.stream(MSGS, opts(max_new_tokens=6, kv_reuse=False), timeout=30)]
    assert ran_in == ["ryzenai-inline-generation"] * 2
    assert plain == timed and len(plain) >= 1


def test_inline_streams_read_in_turn_in_one_thread_both_complete(monkeypatch):
    """Two streams zipped in one thread: each generation runs on its own thread, so the second
    gets the model when the first ends, and neither is stopped as abandoned after ABANDON_AFTER
    (raised here so that a stop would not go unnoticed)."""
    monkeypatch.setattr(scheduler_module, "ABANDON_AFTER", 30.0)
    e = Engine.get(TINY_LLAMA, execution="inline")
    o = opts(max_new_tokens=12, kv_reuse=False)
    other = [ChatMessage("user", "Name a prefill bucket.")]
    alone = (e.generate(MSGS, o).text, e.generate(other, o).text)
    for timeout in (None, 30):  # the second in this thread too, or on a thread of its own (timed)
        a, b = [], []
        for x, y in itertools.zip_longest(e.stream(MSGS, o), e.stream(other, o, timeout=timeout)):
            a.append(x.text if x else "")
            b.append(y.text if y else "")
        assert ("".join(a), "".join(b)) == alone
