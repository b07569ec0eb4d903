"""Bad input, one row each: a typed error from one hierarchy whose message names the value,
the limit or expectation, and the fix; never a hang; the shared model still works after."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from conftest import REPLICAS, TINY_LLAMA, TINY_QWEN3
from ryzenai_core import (
    ChatMessage,
    ChatTemplateError,
    ConfigError,
    ContextWindowExceededError,
    Engine,
    InvalidRequestError,
    LfsPointerError,
    MissingTokenizerError,
    ModelNotFoundError,
    ModelPackage,
    RuntimeNotAvailableError,
    RyzenAIError,
    UnsafePathError,
    UnsupportedModelError,
)
from ryzenai_core.options import validated_options
from ryzenai_core.prompt.structured import json_schema_guidance, tool_call_guidance

HI = [ChatMessage("user", "hi")]
TOOL = {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {}}}}


def shared(execution: str = "process") -> Engine:
    return Engine.get(TINY_QWEN3, execution=execution)  # type: ignore[arg-type]


def edited(tmp: Path, src: Path, edit: Callable[[Path], None], name: str | None = None) -> Path:
    dst = tmp / (name or src.name)
    shutil.copytree(src, dst)
    edit(dst)
    return dst


def config_edit(fn: Callable[[dict], None]) -> Callable[[Path], None]:
    def _edit(folder: Path) -> None:
        path = folder / "genai_config.json"
        cfg = json.loads(path.read_text())
        fn(cfg)
        path.write_text(json.dumps(cfg))

    return _edit


def small_window(folder: Path) -> None:
    config_edit(lambda c: c["search"].__setitem__("max_length", 128))(folder)


def gen(engine: Engine, messages=HI, **opts) -> None:
    engine.generate(messages, validated_options(max_new_tokens=4, temperature=0, **opts))


# id -> (action(tmp_path), error type, fragments the message must contain)
ROWS: dict[str, tuple[Callable[[Path], object], type[RyzenAIError], list[str]]] = {
    "missing folder": (
        lambda t, x: ModelPackage.open(t / "nope"),
        ModelNotFoundError,
        ["nope", "does not exist", "genai_config.json"],
    ),
    "file not folder": (
        lambda t, x: (t / "m.onnx").write_text("x") and ModelPackage.open(t / "m.onnx"),
        ModelNotFoundError,
        ["m.onnx", "is a file"],
    ),
    "no genai_config": (lambda t, x: ModelPackage.open(t), ConfigError, ["no genai_config.json"]),
    "corrupt genai_config": (
        lambda t, x: ModelPackage.open(
            edited(t, TINY_LLAMA, lambda f: (f / "genai_config.json").write_text('{"model": [1,'))
        ),
        ConfigError,
        ["not valid JSON", "line 1", "restore"],
    ),
    "genai_config without model": (
        lambda t, x: ModelPackage.open(edited(t, TINY_LLAMA, lambda f: (f / "genai_config.json").write_text("{}"))),
        ConfigError,
        ['no "model" object'],
    ),
    "model type the runtime refuses": (
        lambda t, x: gen(
            Engine.get(
                edited(t, TINY_LLAMA, config_edit(lambda c: c["model"].__setitem__("type", "gpt9"))), execution=x
            )
        ),
        UnsupportedModelError,
        ["'gpt9'", "does not run model.type", "Upgrade onnxruntime-genai"],
    ),
    "genai_config is an LFS pointer": (
        lambda t, x: ModelPackage.open(
            edited(
                t,
                TINY_LLAMA,
                lambda f: (f / "genai_config.json").write_text(
                    "version https://git-lfs.github.com/spec/v1\noid sha256:00\nsize 3\n"
                ),
            )
        ),
        LfsPointerError,
        ["genai_config.json", "Git LFS pointer", "git lfs pull"],
    ),
    "weights are LFS pointers": (
        lambda t, x: gen(
            Engine.get(REPLICAS / "Llama-3.2-1B_rai_1.8.0_npu_4K-lfs-pointers", provider="cpu", execution=x)
        ),
        LfsPointerError,
        ["model.onnx.data", "bytes", "git lfs pull"],
    ),
    "missing tokenizer": (
        lambda t, x: ModelPackage.open(edited(t, TINY_LLAMA, lambda f: (f / "tokenizer.json").unlink())),
        MissingTokenizerError,
        ["tokenizer.json", "tokenizer.model", "copy the tokenizer"],
    ),
    "decoder path escapes": (
        lambda t, x: ModelPackage.open(
            edited(t, TINY_LLAMA, config_edit(lambda c: c["model"]["decoder"].__setitem__("filename", "../../x.onnx")))
        ),
        UnsafePathError,
        ["'../../x.onnx'", "outside the model folder"],
    ),
    "absolute external data path": (
        lambda t, x: ModelPackage.open(
            edited(
                t,
                REPLICAS / "Llama-3.2-1B_rai_1.8.0_hybrid",
                config_edit(
                    lambda c: c["model"]["decoder"]["session_options"]["provider_options"][0]["RyzenAI"].__setitem__(
                        "external_data_file", "/etc/shadow"
                    )
                ),
            )
        ),
        UnsafePathError,
        ["external_data_file", "'/etc/shadow'"],
    ),
    "Ryzen AI package without the Ryzen AI runtime": (
        lambda t, x: gen(Engine.get(REPLICAS / "Qwen3-4B_rai_1.8.0_npu_4K", execution=x)),
        RuntimeNotAvailableError,
        ["Qwen3-4B_rai_1.8.0_npu_4K", "AMD's Ryzen AI EP library", "a public build", "provider='cpu'"],
    ),
    "1.6 layout on a newer runtime": (
        lambda t, x: gen(Engine.get(REPLICAS / "Qwen-2.5-1.5B-Instruct-onnx-ryzenai-npu", provider="cpu", execution=x)),
        RuntimeNotAvailableError,
        ["custom-ops layout", "matching Ryzen AI runtime"],
    ),
    "unknown provider": (
        lambda t, x: gen(Engine.get(TINY_LLAMA, provider="npu2", execution=x)),
        InvalidRequestError,
        ["'npu2'", "'cpu', 'cuda', 'dml'"],
    ),
    "zero threads": (
        lambda t, x: gen(Engine.get(TINY_LLAMA, num_threads=0, execution=x)),
        InvalidRequestError,
        ["num_threads is 0", "at least 1"],
    ),
    "bad RYZENAI_VERSION": (
        lambda t, x: ModelPackage.open(TINY_LLAMA, release="v1.8"),
        InvalidRequestError,
        ["'v1.8'", "1.8.0"],
    ),
    "empty message list": (lambda t, x: gen(shared(x), []), InvalidRequestError, ["empty", "at least one"]),
    "unsupported role": (
        lambda t, x: ChatMessage("robot", "hi"),
        InvalidRequestError,
        ["'robot'", "system, user, assistant, tool"],
    ),
    "unsupported content type": (
        lambda t, x: ChatMessage("user", 42),
        InvalidRequestError,
        ["int", "string or a list of parts"],
    ),
    "unsupported content part": (
        lambda t, x: ChatMessage("user", [{"type": "audio", "data": "x"}]),
        InvalidRequestError,
        ["'audio'", "'type': 'text'"],
    ),
    "image to a text-only package": (
        lambda t, x: gen(shared(x), [ChatMessage("user", [{"type": "image", "url": "x.png"}])]),
        InvalidRequestError,
        ["image", "no vision model", "text only"],
    ),
    "negative temperature": (
        lambda t, x: validated_options(temperature=-0.5),
        InvalidRequestError,
        ["temperature=-0.5", "greater than or equal to 0"],
    ),
    "top_p over 1": (
        lambda t, x: validated_options(top_p=1.5),
        InvalidRequestError,
        ["top_p=1.5", "less than or equal to 1"],
    ),
    "max_tokens 0": (
        lambda t, x: validated_options(max_new_tokens=0),
        InvalidRequestError,
        ["max_new_tokens=0", "greater than or equal to 1"],
    ),
    "unknown option": (
        lambda t, x: validated_options(temprature=0.5),
        InvalidRequestError,
        ["temprature=0.5", "not an option", "did you mean 'temperature'"],
    ),
    "empty stop string": (lambda t, x: validated_options(stop=[""]), InvalidRequestError, ["stop", "non-empty"]),
    "prompt over the limit (error policy)": (
        lambda t, x: gen(
            Engine.get(edited(t, TINY_LLAMA, small_window), execution=x), [ChatMessage("user", "word " * 300)]
        ),
        ContextWindowExceededError,
        ["prompt of", "limit of 127", "Shorten the prompt"],
    ),
    "prompt over the limit (drop_oldest, nothing to drop)": (
        lambda t, x: gen(
            Engine.get(edited(t, TINY_LLAMA, small_window), execution=x),
            [ChatMessage("system", "rule " * 300), ChatMessage("user", "hi")],
            overflow="drop_oldest",
        ),
        ContextWindowExceededError,
        ["limit of 127", "Dropping old turns did not help"],
    ),
    "bad overflow policy": (
        lambda t, x: validated_options(overflow="truncate"),
        InvalidRequestError,
        ["overflow='truncate'", "'error' or 'drop_oldest'"],
    ),
    "tool without a name": (
        lambda t, x: gen(shared(x), tools=[{"type": "function", "function": {"description": "x"}}]),
        InvalidRequestError,
        ["no function name", "'name'"],
    ),
    "tool parameters not an object": (
        lambda t, x: gen(
            shared(x), tools=[{"type": "function", "function": {"name": "f", "parameters": {"type": "string"}}}]
        ),
        InvalidRequestError,
        ["'f'", "JSON schema object"],
    ),
    "tool_choice names an unknown tool": (
        lambda t, x: tool_call_guidance("qwen3", [TOOL], 64, "g"),
        InvalidRequestError,
        ["'g'", "bound tools: f"],
    ),
    "json schema guidance is not JSON": (
        lambda t, x: validated_options(guidance={"type": "json_schema", "data": "{nope"}),
        InvalidRequestError,
        ["not valid JSON"],
    ),
    "grammar that does not compile": (
        lambda t, x: gen(shared(x), guidance={"type": "lark_grammar", "data": "start: ((("}),
        InvalidRequestError,
        ["lark_grammar", "could not be compiled", "fix the schema/grammar"],
    ),
    "structured output budget too small": (
        lambda t, x: json_schema_guidance(
            {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "string"}}}, 6
        ),
        InvalidRequestError,
        ["max_new_tokens=6 is too small", "raise max_new_tokens to at least"],
    ),
    "chat template that raises": (
        lambda t, x: gen(shared(x), chat_template="{{ raise_exception('no system role here') }}"),
        ChatTemplateError,
        ["no system role here"],
    ),
    "chat template reaching Python internals": (
        lambda t, x: gen(shared(x), chat_template="{{ ''.__class__.__mro__[1].__subclasses__() }}"),
        ChatTemplateError,
        ["sandbox"],
    ),
}


@pytest.mark.parametrize("execution", ["process", "inline"])
@pytest.mark.parametrize("row", sorted(ROWS))
def test_bad_input(row, execution, tmp_path, monkeypatch):
    action, error, fragments = ROWS[row]
    before = set(Engine.registry.engines())
    try:
        with pytest.raises(error) as info:
            action(tmp_path, execution)
    finally:
        made = set(Engine.registry.engines()) - before - {(shared(execution).key, execution)}
        for engine in Engine.registry.forget(made.__contains__, Engine):
            engine.close()  # engines the row made: their workers end now
    message = str(info.value)
    for fragment in fragments:
        assert fragment in message, f"{row}: {fragment!r} not in {message!r}"
    assert isinstance(info.value, RyzenAIError)
    # the shared model is still usable
    c = shared(execution).generate(HI, validated_options(max_new_tokens=2, temperature=0))
    assert c.usage.completion_tokens == 2


def test_bad_release_env_var(monkeypatch):
    monkeypatch.setenv("RYZENAI_VERSION", "latest")
    with pytest.raises(InvalidRequestError, match=r"'latest'.*RYZENAI_VERSION"):
        ModelPackage.open(REPLICAS / "Qwen3-4B_rai_1.8.0_npu_4K")


def test_plain_package_limit_error_names_the_window_once():
    engine = Engine.get(TINY_LLAMA, execution="inline")
    with pytest.raises(ContextWindowExceededError) as info:
        engine.generate([ChatMessage("user", "x " * 5000)], validated_options(max_new_tokens=3))
    message = str(info.value)
    assert "prompt limit of 4095 tokens (its window of 4096 tokens less the one token an answer needs)" in message
    assert message.count("4096") == 1  # the window named once


def test_a_provider_missing_from_the_runtime_says_which_build_to_install():
    engine = Engine.get(TINY_LLAMA, provider="cuda", execution="inline")
    with pytest.raises(RuntimeNotAvailableError) as info:
        engine.generate(HI, validated_options(max_new_tokens=2))
    message = str(info.value)
    assert "provider='cuda' is not available" in message and "onnxruntime-genai-cuda" in message
    assert "git lfs pull" not in message


@pytest.mark.parametrize("face", ["core", "langchain", "llamaindex"])
def test_an_unknown_provider_is_refused_at_construction(face):
    def make():
        if face == "core":
            return Engine.get(TINY_LLAMA, provider="gpu")
        if face == "langchain":
            from langchain_ryzenai import ChatRyzenAI

            return ChatRyzenAI(model=str(TINY_LLAMA), provider="gpu")
        from llamaindex_ryzenai import RyzenAILLM

        return RyzenAILLM(model=str(TINY_LLAMA), provider="gpu")

    with pytest.raises(
        ValueError, match=r"provider 'gpu' is not supported; use one of 'auto', 'npu', 'cpu', 'cuda', 'dml'"
    ):
        make()


def test_tools_on_a_template_without_tools_are_refused_not_dropped():
    from langchain_core.tools import tool

    from conftest import TINY_GEMMA3
    from langchain_ryzenai import ChatRyzenAI

    @tool
    def multiply(a: int, b: int) -> int:
        """Multiply two integers."""
        return a * b

    llm = ChatRyzenAI(model=str(TINY_GEMMA3), max_tokens=4)
    for call in (
        lambda: llm.bind_tools([multiply]).invoke("6*7?"),
        lambda: llm.get_num_tokens_from_messages(["6*7?"], tools=[multiply]),
    ):
        with pytest.raises(
            InvalidRequestError, match=r"does not render tools, so 1 tool\(s\) would be silently left out"
        ):
            call()
    history = [
        ("human", "6*7?"),
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"name": "multiply", "args": {"a": 6, "b": 7}, "id": "c1"}],
        },
    ]
    with pytest.raises(InvalidRequestError, match=r"a tool call or result \(message #1\)"):
        llm.invoke(history)
    assert llm.invoke("6*7?").usage_metadata["output_tokens"] == 4
