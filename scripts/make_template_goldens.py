"""Render the built-in chat templates with transformers and store the results as goldens.

``tests/unit/test_chat_template.py`` checks that ``ryzenai_core.prompt.templates.ChatTemplate`` renders
every case byte-for-byte like this. CI has no transformers, so the output is committed:

    python scripts/make_template_goldens.py            # writes tests/fixtures/template_goldens.json
    python scripts/make_template_goldens.py --check    # exit 1 if the committed file is stale

Each case is rendered with ``tokenizer.apply_chat_template(..., tokenize=False)`` of a
tokenizer loaded from a fixture model folder (so the special tokens are the ones transformers
passes: ``<|begin_of_text|>``/``<|eot_id|>`` for Llama, no bos and ``<|im_end|>`` for Qwen3,
``<bos>``/``<eos>`` for Gemma 3), with the template file given as ``chat_template``. Llama
cases pass a fixed ``date_string`` so the output does not depend on today's date.

Needs the ``fixtures`` extra (transformers, tokenizers).
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from pathlib import Path
from typing import Any

import transformers
from transformers import AutoTokenizer

from ryzenai_core.messages import normalize_tools

ROOT = Path(__file__).resolve().parents[1]
TEMPLATES = ROOT / "core" / "templates"
MODELS = ROOT / "tests" / "fixtures" / "models"
OUT = ROOT / "tests" / "fixtures" / "template_goldens.json"

LLAMA = ("llama-3.2-instruct.jinja", "tiny-llama")
QWEN3 = ("qwen3.jinja", "tiny-qwen3")
GEMMA3 = ("gemma-3-it.jinja", "tiny-gemma3-text")
CHATML = ("chatml.jinja", "tiny-qwen3")
DATE = {"date_string": "26 Jul 2024"}

# Tools in the form ryzenai_core.messages.normalize_tools produces (key order matters to `tojson`).
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city (returns <temperature> & conditions).",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name, e.g. Zürich"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city"],
        },
    },
}
ADD = {
    "type": "function",
    "function": {
        "name": "add",
        "description": "Add two numbers.",
        "parameters": {
            "type": "object",
            "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
            "required": ["a", "b"],
        },
    },
}


def user(text: Any) -> dict[str, Any]:
    return {"role": "user", "content": text}


def system(text: Any) -> dict[str, Any]:
    return {"role": "system", "content": text}


def assistant(text: Any = "", *, calls: list[dict[str, Any]] | None = None, reasoning: str | None = None) -> dict:
    # Same keys, in the same order, as ryzenai_core ChatMessage.to_hf().
    out: dict[str, Any] = {"role": "assistant", "content": text}
    if calls:
        out["tool_calls"] = calls
    if reasoning is not None:
        out["reasoning_content"] = reasoning
    return out


def call(call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def tool(text: str, call_id: str, name: str) -> dict[str, Any]:
    return {"role": "tool", "content": text, "tool_call_id": call_id, "name": name}


SYS = system("You are a helpful assistant. Answer briefly.")
Q1 = user("What is the capital of France?")
A1 = assistant("The capital of France is Paris.")
Q2 = user('And of Switzerland? Use <b>bold</b> & "quotes"; naïve café ✓')
WEATHER_Q = user("What's the weather in Zürich?")
WEATHER_CALL = call("call_0", "get_weather", {"city": "Zürich", "unit": "celsius"})
WEATHER_RESULT = tool('{"temperature": 21, "conditions": "sunny"}', "call_0", "get_weather")
ADD_CALL = call("call_1", "add", {"a": 2, "b": 3.5})
ADD_RESULT = tool("5.5", "call_1", "add")


def case(
    name: str,
    spec: tuple[str, str],
    messages: list[dict[str, Any]],
    *,
    tools: list[dict[str, Any]] | None = None,
    add_generation_prompt: bool = True,
    **kwargs: Any,
) -> dict[str, Any]:
    template, tokenizer = spec
    return {
        "name": name,
        "template": template,
        "tokenizer": tokenizer,
        "messages": messages,
        "tools": tools,
        "add_generation_prompt": add_generation_prompt,
        "kwargs": kwargs,
    }


CASES = [
    # ---------------------------------------------------------------- Llama 3.2
    case("llama/user", LLAMA, [Q1], **DATE),
    case("llama/system_user", LLAMA, [SYS, Q1], **DATE),
    case("llama/multi_turn", LLAMA, [SYS, Q1, A1, Q2], **DATE),
    case("llama/no_generation_prompt", LLAMA, [Q1, A1], add_generation_prompt=False, **DATE),
    case("llama/tools", LLAMA, [SYS, WEATHER_Q], tools=[WEATHER, ADD], **DATE),
    case("llama/tools_no_system", LLAMA, [WEATHER_Q], tools=[WEATHER], **DATE),
    case(
        "llama/tools_in_system_message",
        LLAMA,
        [SYS, WEATHER_Q],
        tools=[WEATHER],
        tools_in_user_message=False,
        **DATE,
    ),
    case(
        "llama/tool_call_and_result",
        LLAMA,
        [SYS, WEATHER_Q, assistant(calls=[WEATHER_CALL]), WEATHER_RESULT],
        tools=[WEATHER],
        **DATE,
    ),
    case(
        "llama/tool_result_then_answer",
        LLAMA,
        [WEATHER_Q, assistant(calls=[WEATHER_CALL]), WEATHER_RESULT, assistant("It is sunny, 21 °C."), Q2],
        tools=[WEATHER],
        **DATE,
    ),
    # ---------------------------------------------------------------- Qwen3
    case("qwen3/user", QWEN3, [Q1]),
    case("qwen3/system_user", QWEN3, [SYS, Q1]),
    case("qwen3/multi_turn", QWEN3, [SYS, Q1, A1, Q2]),
    case(
        "qwen3/multi_turn_think_in_content",
        QWEN3,
        [Q1, assistant("<think>\nFrance... Paris.\n</think>\n\nParis."), Q2],
    ),
    case("qwen3/no_generation_prompt", QWEN3, [Q1, A1], add_generation_prompt=False),
    case("qwen3/enable_thinking_true", QWEN3, [SYS, Q1], enable_thinking=True),
    case("qwen3/enable_thinking_false", QWEN3, [SYS, Q1], enable_thinking=False),
    case("qwen3/enable_thinking_none", QWEN3, [SYS, Q1]),
    case(
        "qwen3/reasoning_content_last",
        QWEN3,
        [Q1, assistant("Paris.", reasoning="The user asks about France.\nIts capital is Paris.")],
        add_generation_prompt=False,
    ),
    case(
        "qwen3/reasoning_content_history",
        QWEN3,
        [Q1, assistant("Paris.", reasoning="Capital of France: Paris."), Q2],
        enable_thinking=False,
    ),
    case("qwen3/tools", QWEN3, [SYS, WEATHER_Q], tools=[WEATHER, ADD]),
    case("qwen3/tools_no_system", QWEN3, [WEATHER_Q], tools=[WEATHER]),
    case(
        "qwen3/tool_calls_and_results",
        QWEN3,
        [
            SYS,
            WEATHER_Q,
            assistant(calls=[WEATHER_CALL, ADD_CALL]),
            WEATHER_RESULT,
            ADD_RESULT,
        ],
        tools=[WEATHER, ADD],
    ),
    case(
        "qwen3/tool_call_with_content_and_reasoning",
        QWEN3,
        [
            WEATHER_Q,
            assistant("Let me check.", calls=[WEATHER_CALL], reasoning="I should call get_weather."),
            WEATHER_RESULT,
            assistant("It is sunny, 21 °C.", reasoning="The tool says sunny."),
        ],
        tools=[WEATHER],
        add_generation_prompt=False,
    ),
    # ---------------------------------------------------------------- Gemma 3
    case("gemma3/user", GEMMA3, [Q1]),
    case("gemma3/system_user", GEMMA3, [SYS, Q1]),
    case("gemma3/multi_turn", GEMMA3, [SYS, Q1, A1, Q2]),
    case("gemma3/no_generation_prompt", GEMMA3, [Q1, A1], add_generation_prompt=False),
    case(
        "gemma3/text_parts",
        GEMMA3,
        [system([{"type": "text", "text": "Be terse."}]), user([{"type": "text", "text": "  Hello there.  "}])],
    ),
    # ---------------------------------------------------------------- generic ChatML fallback
    case("chatml/user", CHATML, [Q1]),
    case("chatml/system_multi_turn", CHATML, [SYS, Q1, A1, Q2]),
    case("chatml/no_generation_prompt", CHATML, [Q1, A1], add_generation_prompt=False),
    case("chatml/tools", CHATML, [SYS, WEATHER_Q], tools=[WEATHER, ADD]),
    case(
        "chatml/tool_calls_and_results",
        CHATML,
        [WEATHER_Q, assistant(calls=[WEATHER_CALL, ADD_CALL]), WEATHER_RESULT, ADD_RESULT],
        tools=[WEATHER, ADD],
    ),
    case(
        "chatml/text_parts",
        CHATML,
        [user([{"type": "text", "text": "Hello "}, {"type": "text", "text": "there."}])],
    ),
]


def render(c: dict[str, Any], tokenizers: dict[str, Any]) -> dict[str, Any]:
    name = c["tokenizer"]
    if name not in tokenizers:
        tokenizers[name] = AutoTokenizer.from_pretrained(MODELS / name)
    tok = tokenizers[name]
    if c["tools"] is not None and normalize_tools(c["tools"]) != c["tools"]:
        sys.exit(f"{c['name']}: tools are not in normalize_tools' form; write them as it returns them")
    source = (TEMPLATES / c["template"]).read_bytes().decode("utf-8")
    expected = tok.apply_chat_template(
        copy.deepcopy(c["messages"]),
        tools=copy.deepcopy(c["tools"]),
        chat_template=source,
        tokenize=False,
        add_generation_prompt=c["add_generation_prompt"],
        **copy.deepcopy(c["kwargs"]),
    )
    assert isinstance(expected, str), type(expected)
    return {**c, "special_tokens": dict(tok.special_tokens_map), "expected": expected}


def build() -> str:
    tokenizers: dict[str, Any] = {}
    doc = {
        "generator": "scripts/make_template_goldens.py",
        "transformers": transformers.__version__,
        "cases": [render(c, tokenizers) for c in CASES],
    }
    return json.dumps(doc, ensure_ascii=False, indent=1) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare with the committed file instead of writing")
    args = parser.parse_args()
    text = build()
    if args.check:
        current = OUT.read_text(encoding="utf-8") if OUT.exists() else ""
        # The transformers version line may differ; compare the cases only.
        same = json.loads(current)["cases"] == json.loads(text)["cases"] if current else False
        print("up to date" if same else f"{OUT} is stale: run python scripts/make_template_goldens.py")
        return 0 if same else 1
    OUT.write_text(text, encoding="utf-8")
    print(f"wrote {len(CASES)} cases to {OUT.relative_to(ROOT)} (transformers {transformers.__version__})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
