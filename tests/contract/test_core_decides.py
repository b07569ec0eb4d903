"""The core decides, the faces translate: both faces send the core the same request for the same call.

Real OGA on the fixture models. The request each face builds is recorded on its way into the
real engine (the call still runs; for the per-call vocabulary, it stops there), and compared
field by field: every per-call option by each face's name for it, every other word the core
knows (aliases, options it does not have), structured output and tool choice.
"""

from __future__ import annotations

import ast
import json
import pickle
import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import HumanMessage, SystemMessage
from llama_index.core.base.llms.types import ChatMessage as LIMessage
from llama_index.core.base.llms.types import MessageRole
from llama_index.core.prompts import ChatPromptTemplate
from pydantic import BaseModel

from conftest import MODELS, ROOT, TINY_LLAMA, TINY_QWEN3, tear_first_deltas
from langchain_ryzenai import ChatRyzenAI
from llamaindex_ryzenai import RyzenAILLM
from ryzenai_core import ChatMessage, Engine, GenerationTimeoutError, InvalidRequestError, Request
from ryzenai_core.options import CALL_SETTINGS, OPTIONS, validated_options
from ryzenai_core.vocabulary import ALIASES, UNSUPPORTED

QWEN = str(TINY_QWEN3)
#: The adapters every face object below may choose from per call (the request stops before any load).
ADAPTERS = {name: str(MODELS / "tiny-qwen3-lora" / "adapters" / f"{name}.onnx_adapter") for name in ("alpha", "beta")}
ADD = {
    "type": "function",
    "function": {
        "name": "add",
        "description": "Add two integers.",
        "parameters": {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"],
        },
    },
}


class Answer(BaseModel):
    city: str
    population: int


@pytest.fixture
def recorded(monkeypatch):
    """Every request that reaches Engine.run / Engine.arun (the calls run as usual)."""
    seen: list[Request] = []
    run, arun = Engine.run, Engine.arun

    def recording_run(self: Engine, request: Request) -> Any:
        seen.append(request)
        return run(self, request)

    def recording_arun(self: Engine, request: Request) -> Any:
        seen.append(request)
        return arun(self, request)

    monkeypatch.setattr(Engine, "run", recording_run)
    monkeypatch.setattr(Engine, "arun", recording_arun)
    return seen


def _sent(request: Request) -> tuple[Any, ...]:
    """What a request asks of the core (options compare without the face's names for them: messages only)."""
    return (pickle.dumps(list(request.messages)), request.options, request.timeout, request.max_retries)


LC_SYSTEM = [SystemMessage("Answer briefly."), HumanMessage("What is 2 plus 3?")]
CORE_SYSTEM = [ChatMessage("system", "Answer briefly."), ChatMessage("user", "What is 2 plus 3?")]
LI_SYSTEM = [
    LIMessage(role=MessageRole.SYSTEM, content="Answer briefly."),
    LIMessage(role=MessageRole.USER, content="What is 2 plus 3?"),
]


@pytest.mark.parametrize(
    ("langchain", "llamaindex"),
    [
        pytest.param(
            lambda: ChatRyzenAI(model=QWEN, temperature=0, max_tokens=12, stop=["END"], timeout=30).invoke(LC_SYSTEM),
            lambda: RyzenAILLM(model=QWEN, temperature=0, max_new_tokens=12, stop=["END"], timeout=30).chat(LI_SYSTEM),
            id="sampling-limits-stop",
        ),
        pytest.param(
            lambda: ChatRyzenAI(model=QWEN, max_tokens=6, repetition_penalty=1.3, max_retries=3).invoke(LC_SYSTEM),
            lambda: RyzenAILLM(model=QWEN, max_new_tokens=6, repetition_penalty=1.3, max_retries=3).chat(LI_SYSTEM),
            id="repetition-penalty-retries",
        ),
        pytest.param(
            lambda: ChatRyzenAI(model=QWEN, max_tokens=6, max_retries=0).invoke(LC_SYSTEM),
            lambda: RyzenAILLM(model=QWEN, max_new_tokens=6, max_retries=0).chat(LI_SYSTEM),
            id="no-retries",
        ),
        pytest.param(
            lambda: ChatRyzenAI(model=QWEN, max_tokens=64).bind_tools([ADD], tool_choice="add").invoke(LC_SYSTEM),
            lambda: RyzenAILLM(model=QWEN, max_new_tokens=64).chat(LI_SYSTEM, tools=[ADD], tool_choice="add"),
            id="forced-tool-call",
        ),
        pytest.param(
            lambda: ChatRyzenAI(model=QWEN).bind_tools([ADD], tool_choice="none").invoke(LC_SYSTEM),
            lambda: RyzenAILLM(model=QWEN).chat(LI_SYSTEM, tools=[ADD], tool_choice="none"),
            id="tools-not-sent",
        ),
        pytest.param(
            lambda: (
                ChatRyzenAI(model=QWEN, max_tokens=64)
                .bind_tools([ADD], tool_choice="any", parallel_tool_calls=False)
                .invoke(LC_SYSTEM)
            ),
            lambda: RyzenAILLM(model=QWEN, max_new_tokens=64).chat_with_tools(
                [ADD], chat_history=list(LI_SYSTEM), tool_required=True
            ),
            id="tool-required",
        ),
        pytest.param(
            lambda: ChatRyzenAI(model=QWEN, max_tokens=4).bind_tools([ADD]).invoke(LC_SYSTEM),
            lambda: RyzenAILLM(model=QWEN, max_new_tokens=4).chat(LI_SYSTEM, tools=[ADD], tool_choice="auto"),
            id="tool-choice-auto",
        ),
        pytest.param(
            lambda: ChatRyzenAI(model=QWEN, max_tokens=48).with_structured_output(Answer).invoke(LC_SYSTEM),
            lambda: RyzenAILLM(model=QWEN, max_new_tokens=48).structured_predict(
                Answer, ChatPromptTemplate(message_templates=LI_SYSTEM)
            ),
            id="structured-output",
        ),
        pytest.param(
            lambda: ChatRyzenAI(model=QWEN, max_tokens=24).invoke(LC_SYSTEM, response_format={"type": "json_object"}),
            lambda: RyzenAILLM(model=QWEN, max_new_tokens=24).chat(LI_SYSTEM, response_format={"type": "json_object"}),
            id="json-object",
        ),
        pytest.param(
            lambda: ChatRyzenAI(model=QWEN, max_tokens=48).invoke(
                LC_SYSTEM, response_format={"type": "json_schema", "schema": Answer.model_json_schema()}
            ),
            lambda: RyzenAILLM(model=QWEN, max_new_tokens=48).chat(
                LI_SYSTEM, response_format={"type": "json_schema", "schema": Answer.model_json_schema()}
            ),
            id="json-schema",
        ),
        pytest.param(
            lambda: ChatRyzenAI(
                model=str(TINY_LLAMA), max_tokens=4, model_kwargs={"date_string": "1 Jan 2026"}, enable_thinking=False
            ).invoke(LC_SYSTEM),
            lambda: RyzenAILLM(
                model=str(TINY_LLAMA),
                max_new_tokens=4,
                template_vars={"date_string": "1 Jan 2026"},
                enable_thinking=False,
            ).chat(LI_SYSTEM),
            id="template-variables",
        ),
    ],
)
def test_the_same_call_from_each_face_reaches_the_core_identically(recorded, langchain, llamaindex) -> None:
    langchain()
    llamaindex()
    assert len(recorded) == 2
    assert _sent(recorded[0]) == _sent(recorded[1])


# ---------------------------------------------------------------------- the per-call vocabulary
#: A value of each per-call option (a new option needs one here: the test below fails without it).
SAMPLES: dict[str, Any] = {
    "max_new_tokens": 5,
    "temperature": 0.5,
    "top_p": 0.9,
    "top_k": 7,
    "repetition_penalty": 1.1,
    "seed": 3,
    "stop": ["END"],
    "enable_thinking": False,
    "reasoning_effort": "none",
    "guidance": {"type": "regex", "data": "[a-z]+"},
    "tools": [ADD],
    "tool_choice": "none",
    "parallel_tool_calls": False,
    "response_format": {"type": "json_object"},
    "chat_template": "{{ messages[0]['content'] }}",
    "template_vars": {"date_string": "1 Jan 2026"},
    "overflow": "drop_oldest",
    "kv_reuse": False,
    "adapter": "alpha",
    "timeout": 30.0,
}
FACES = (ChatRyzenAI, RyzenAILLM)


class _Stopped(Exception):
    """Raised where a request reaches the engine: the call goes no further."""


@pytest.fixture
def stopped(monkeypatch):
    """Every request that reaches Engine.run / Engine.arun; the call stops there (no model is loaded)."""
    seen: list[Request] = []

    def stop(self: Engine, request: Request) -> Any:
        seen.append(request)
        raise _Stopped

    monkeypatch.setattr(Engine, "run", stop)
    monkeypatch.setattr(Engine, "arun", stop)
    return seen


def _outcome(face: type, stopped: list[Request], **kwargs: Any) -> Any:
    """What the core is sent for one call of ``face`` with ``kwargs``, or the error that refused it."""
    model = face(model=QWEN, adapters=ADAPTERS)
    call = model.invoke if face is ChatRyzenAI else model.chat
    try:
        call(LC_SYSTEM if face is ChatRyzenAI else LI_SYSTEM, **kwargs)
    except _Stopped:
        return _sent(stopped.pop())
    except InvalidRequestError as exc:  # the same words, each face naming the options its way
        words = str(exc).replace(face.__name__, "<face>").split("; accepted per call")[0]
        for option, name in face.option_names.items():
            words = re.sub(rf"\b{name}\b", option, words)
        return InvalidRequestError, words
    raise AssertionError(f"{face.__name__} with {kwargs} neither reached the core nor refused the call")


def test_every_per_call_option_has_a_sample():
    assert set(SAMPLES) == {*OPTIONS, *CALL_SETTINGS}


@pytest.mark.parametrize("option", sorted(SAMPLES))
def test_every_per_call_option_reaches_the_core_the_same_from_each_face(stopped, option) -> None:
    """Each face takes each option per call, by its framework's name for it, and sends it as the other does."""
    sent = [_outcome(face, stopped, **{face.option_names.get(option, option): SAMPLES[option]}) for face in FACES]
    assert not isinstance(sent[0][0], type), sent[0]  # accepted, not refused
    assert sent[0] == sent[1]
    assert sent[0] != _outcome(ChatRyzenAI, stopped)  # the option changed the request


def test_an_adapter_is_chosen_by_name_alike_on_each_face(stopped) -> None:
    """Both faces send the file the name chooses, refuse a name the object lacks in the same words
    (listing the names it has), and take None as the base model."""
    sent = [_outcome(face, stopped, adapter="beta") for face in FACES]
    assert sent[0] == sent[1]
    assert sent[0][1].adapter.name == "beta" and sent[0][1].adapter.path == str(Path(ADAPTERS["beta"]).resolve())
    refused = [_outcome(face, stopped, adapter="gamma") for face in FACES]
    assert refused[0] == refused[1]
    assert refused[0][0] is InvalidRequestError and "'alpha', 'beta'" in refused[0][1]
    base = [_outcome(face, stopped, adapter=None) for face in FACES]
    assert base[0] == base[1] == _outcome(ChatRyzenAI, stopped) and base[0][1].adapter is None


def _other_words() -> list[str]:
    """Every word for a per-call option besides each face's own: the options' names, aliases, names of
    options the core does not have, each face's names for options; and a misspelling."""
    named = {n for face in FACES for n in face.option_names.values()}
    own = {k for face in FACES for k in face.framework_keywords}
    return sorted(({*OPTIONS, *ALIASES, *UNSUPPORTED, *named} - own) | {"temprature"})


@pytest.mark.parametrize("word", _other_words())
def test_a_per_call_word_means_the_same_on_each_face(stopped, word) -> None:
    """Accepted by both faces and sent alike, or refused by both in the same words: an option one face
    took and the other refused (LlamaIndex's do_sample, once) fails here."""
    option = ALIASES.get(word) or next((o for f in FACES for o, n in f.option_names.items() if n == word), word)
    value = SAMPLES.get(option, 1)
    outcomes = [_outcome(face, stopped, **{word: value}) for face in FACES]
    assert outcomes[0] == outcomes[1]


def test_a_faces_own_keywords_are_no_word_of_the_core() -> None:
    """A face's own keywords (LangChain's model_kwargs, model) are its framework's, never an option's name."""
    for face in FACES:
        assert not set(face.framework_keywords) & {*OPTIONS, *ALIASES, *UNSUPPORTED, *CALL_SETTINGS}
        assert set(face.option_names) <= set(OPTIONS)


def test_the_core_resolves_a_forced_call_once_the_same_for_both_faces(recorded) -> None:
    """Grammar, budget and thinking are the core's decisions: one resolution for either face."""
    lc = ChatRyzenAI(model=QWEN, temperature=0).bind_tools([ADD], tool_choice="required").invoke(LC_SYSTEM)
    li = RyzenAILLM(model=QWEN, temperature=0).chat(LI_SYSTEM, tools=[ADD], tool_choice="required")
    session = Engine.get(QWEN, execution="inline").inline_session()
    resolved = [session.resolve(r.options) for r in recorded]
    assert resolved[0] == resolved[1].replace(option_names=resolved[0].option_names)
    assert resolved[0].guidance is not None and resolved[0].guidance.type == "lark_grammar"
    assert resolved[0].enable_thinking is False  # a grammar decides every token: the thinking block is closed
    assert resolved[0].max_new_tokens == Engine.get(QWEN).budget.bounded_output_tokens
    assert [c["name"] for c in lc.tool_calls] == ["add"]
    assert [b.tool_name for b in li.message.blocks if hasattr(b, "tool_name")] == ["add"]


def test_the_core_says_the_answers_form_in_the_prompt_for_either_face() -> None:
    """A response format is said in the prompt by the core (the schema, compact), counted as prompt tokens alike."""
    engine = Engine.get(QWEN)
    schema = {"type": "json_schema", "schema": Answer.model_json_schema()}
    shaped = validated_options(max_new_tokens=48, response_format=schema)
    prompt = engine.render(CORE_SYSTEM, shaped)
    assert 'What is 2 plus 3?\n\nAnswer in JSON matching this schema: {"properties":{"city":{"type":"string"}' in prompt
    counted = engine.count_tokens(CORE_SYSTEM, shaped)
    assert counted > engine.count_tokens(CORE_SYSTEM, validated_options())
    lc = ChatRyzenAI(model=QWEN, max_tokens=48).with_structured_output(Answer, include_raw=True).invoke(LC_SYSTEM)
    assert lc["raw"].usage_metadata["input_tokens"] == counted
    assert RyzenAILLM(model=QWEN, max_new_tokens=48).count_tokens(LI_SYSTEM, response_format=schema) == counted


def test_errors_name_the_option_as_each_face_calls_it() -> None:
    schema = {"type": "json_schema", "schema": Answer.model_json_schema()}
    with pytest.raises(ValueError, match=r"max_tokens=4 is too small for this schema.*raise max_tokens"):
        ChatRyzenAI(model=QWEN, max_tokens=4).invoke("hi", response_format=schema)
    with pytest.raises(ValueError, match=r"max_new_tokens=4 is too small for this schema.*raise max_new_tokens"):
        RyzenAILLM(model=QWEN, max_new_tokens=4).chat(LI_SYSTEM, response_format=schema)


def test_the_matched_stop_string_is_reported_by_both_faces() -> None:
    engine = Engine.get(QWEN)
    free = engine.generate(CORE_SYSTEM, validated_options(max_new_tokens=24, temperature=0, kv_reuse=False)).text
    stop = free[6:9]
    assert stop.strip()
    lc = ChatRyzenAI(model=QWEN, max_tokens=24, temperature=0, kv_reuse=False, stop=[stop, "never-here"])
    msg = lc.invoke(LC_SYSTEM)
    assert msg.response_metadata["stop_reason"] == "stop_sequence"
    assert msg.response_metadata["stop_sequence"] == stop and msg.content == free[: free.index(stop)]
    li = RyzenAILLM(model=QWEN, max_new_tokens=24, temperature=0, kv_reuse=False, stop=[stop, "never-here"])
    response = li.chat(LI_SYSTEM)
    assert response.raw["stop_sequence"] == stop and response.additional_kwargs["stop_sequence"] == stop
    assert response.raw["budget_plan"] == msg.response_metadata["budget_plan"]  # one key, one plan
    plain = lc.invoke(LC_SYSTEM, stop=["never-here"])
    assert plain.response_metadata["stop_reason"] != "stop_sequence" and "stop_sequence" not in plain.response_metadata


def test_an_inline_call_times_out_while_the_model_is_busy(copy_package) -> None:
    """One deadline for every path: an inline call no longer waits for the next token to time out."""
    engine = Engine.get(copy_package(TINY_LLAMA, "inline-deadline"), execution="inline")
    engine.load()
    # Template work until the 5 s render bound: the model side is busy and sends nothing.
    slow = validated_options(
        max_new_tokens=3,
        chat_template="{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}x",
    )
    started = time.monotonic()
    with pytest.raises(GenerationTimeoutError) as info:
        for _ in engine.stream(CORE_SYSTEM, slow, timeout=0.2):
            pass
    assert time.monotonic() - started < 3.0
    assert info.value.phase == "preparing"


@pytest.mark.slow
def test_a_call_whose_worker_died_before_any_output_is_sent_again_for_either_face(own_copy, monkeypatch, caplog):
    """Retry before first output is the engine's: RyzenAILLM gets it as ChatRyzenAI does."""
    engine = Engine.get(own_copy, execution="process")
    engine.load()
    pid = engine.worker_pid()
    torn = tear_first_deltas(monkeypatch)
    response = RyzenAILLM(model=str(own_copy), max_new_tokens=4, temperature=0).chat(LI_SYSTEM)
    assert response.raw["usage"]["completion_tokens"] == 4
    assert torn and engine.worker_pid() not in (None, pid)
    assert "sending the call again (1 of 1)" in caplog.text


@pytest.mark.slow
def test_the_new_workers_load_does_not_count_in_a_resent_calls_timeout(own_copy, monkeypatch):
    """A call sent again after its worker died waits for the new worker's model load outside
    its timeout, as a first call does (a model takes seconds to load on an NPU)."""
    engine = Engine.get(own_copy, execution="process")
    engine.load()
    backend = engine.backend
    real_call = backend.call

    def slow_load(method: str, *args: Any, **kwargs: Any) -> Any:
        if method == "load":
            time.sleep(2.0)  # a load longer than the call's timeout
        return real_call(method, *args, **kwargs)

    torn = tear_first_deltas(monkeypatch)
    monkeypatch.setattr(backend, "call", slow_load)
    started = time.monotonic()
    out = engine.generate(CORE_SYSTEM, validated_options(max_new_tokens=4, temperature=0), timeout=1.5)
    assert torn and out.usage.completion_tokens == 4
    assert time.monotonic() - started >= 2.0

    # The timeout still fires after a resend: here the new worker never answers the call (as
    # when it waits behind others), and the caller gives up at its timeout plus the load.
    torn.clear()
    launches: list[Any] = []
    real_launch = backend.launch

    def stalled_resend(call: Any) -> None:
        launches.append(call)
        if launches.count(call) == 1:
            real_launch(call)  # the first attempt goes out; the resent one never reaches the worker

    monkeypatch.setattr(backend, "launch", stalled_resend)
    outcome: list[Any] = []

    def run() -> None:
        try:
            engine.generate(CORE_SYSTEM, validated_options(max_new_tokens=4, temperature=0), timeout=1.0)
        except Exception as exc:  # noqa: BLE001 - the test looks at it
            outcome.append(exc)

    started = time.monotonic()
    caller = threading.Thread(target=run, daemon=True)
    caller.start()
    caller.join(15)
    assert not caller.is_alive(), "the caller waited past its timeout after the resend"
    assert torn and len(launches) == 2
    assert isinstance(outcome[0], GenerationTimeoutError)
    assert 2.5 <= time.monotonic() - started < 6.0  # the timeout (1 s) plus the load (2 s)


@pytest.fixture
def own_copy(copy_package) -> Path:
    return copy_package(TINY_LLAMA, "retry-worker")


# ---------------------------------------------------------------------- the import graph
FRAMEWORKS = ("langchain", "langchain_core", "llama_index", "langchain_ryzenai", "llamaindex_ryzenai", "ryzenai_cli")


def test_the_installed_core_imports_neither_face_nor_framework() -> None:
    """Every module of the installed core, imported in a fresh interpreter, loads no framework."""
    code = (
        "import importlib, json, pkgutil, sys\n"
        "import ryzenai_core\n"
        "for m in pkgutil.walk_packages(ryzenai_core.__path__, 'ryzenai_core.'):\n"
        "    if m.name != 'ryzenai_core.engine.worker':\n"
        "        importlib.import_module(m.name)\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    loaded = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)
    assert "ryzenai_core.engine.engine" in loaded and "ryzenai_core.request" in loaded
    assert [m for m in loaded if m.split(".")[0] in FRAMEWORKS] == []


def test_no_core_source_file_names_a_face_or_framework() -> None:
    """Also imports inside functions and importlib calls, which the fresh import above cannot reach."""
    found = []
    for path in sorted((ROOT / "core").glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                names = [node.value] if node.value.split(".")[0] in FRAMEWORKS and " " not in node.value else []
            found += [f"{path.name}:{node.lineno}: {n}" for n in names if n.split(".")[0] in FRAMEWORKS]
    assert found == []
