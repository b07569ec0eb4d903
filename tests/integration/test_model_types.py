"""Model types the installed runtime runs, whether or not ryzenai-llm knows their family.

onnxruntime-genai runs more ``model.type`` values than any list the plugin could keep (its
own generic ``decoder``; AMD already ships gemma-4, LFM2 and Qwen3.5 packages), so the runtime
decides. What the plugin adds per family (end-of-turn markers, reasoning, tool calls) falls back
to plain text for a format it cannot tell, and says so once. The packages here are the tiny
Llama fixture with its type renamed: the CPU runtime runs ``decoder`` and refuses ``gpt9``.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from conftest import TINY_LLAMA
from ryzenai_core import ChatMessage, ChatTemplate, Engine, ModelPackage, UnsupportedModelError
from ryzenai_core.options import validated_options
from ryzenai_core.package.runtime import runtime_info

# A template with no control tokens of a known family (as a new family's own template looks to us).
PLAIN_TEMPLATE = (
    "{% if tools %}Tools: {{ tools | tojson }}\n{% endif %}"
    "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant:{% endif %}"
)


def _retyped(copy_package, model_type: str, name: str, template: str | None = None) -> Path:
    folder = copy_package(TINY_LLAMA, name)
    path = folder / "genai_config.json"
    config = json.loads(path.read_text())
    config["model"]["type"] = model_type
    path.write_text(json.dumps(config))
    if template is not None:
        (folder / "chat_template.jinja").write_text(template)
    return folder


@pytest.mark.parametrize("execution", ["inline", "process"])
def test_a_type_the_runtime_runs_works_through_both_faces(copy_package, capsys, execution):
    from langchain_ryzenai import ChatRyzenAI
    from llamaindex_ryzenai import RyzenAILLM
    from ryzenai_cli.main import main

    folder = _retyped(copy_package, "decoder", "generic-decoder")
    msg = ChatRyzenAI(model=str(folder), execution=execution, temperature=0, max_tokens=4).invoke("hi")
    assert msg.usage_metadata["output_tokens"] == 4
    llm = RyzenAILLM(model=str(folder), execution=execution, temperature=0, max_new_tokens=4)
    assert llm.complete("hi").raw["usage"]["completion_tokens"] == 4
    assert llm.metadata.is_function_calling_model  # its template is Llama 3's: the format is known
    assert main(["info", str(folder), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["model_type"], out["chat_format"], out["chat_format_note"]) == ("decoder", "llama3", None)


def test_an_unknown_format_is_plain_text_and_said_once(copy_package, caplog, capsys):
    from langchain_core.tools import tool

    from langchain_ryzenai import ChatRyzenAI
    from llamaindex_ryzenai import RyzenAILLM
    from ryzenai_cli.main import main

    folder = _retyped(copy_package, "decoder", "new-family", PLAIN_TEMPLATE)
    pkg = ModelPackage.open(folder)
    with caplog.at_level(logging.WARNING, logger="ryzenai_core.prompt.templates"):
        first, again = ChatTemplate.for_package(pkg), ChatTemplate.for_package(pkg)
    assert first.family == again.family == "plain"
    assert first.end_of_turn == [] and first.reasoning_markers is None and not first.calls_tools
    said = [r.getMessage() for r in caplog.records if "does not know the output format" in r.getMessage()]
    assert said == [first.format_message]  # one log line, however many templates are made
    assert "new-family (model type 'decoder', chat template 'chat_template.jinja')" in said[0]
    assert "no tool calls parsed" in said[0] and "chat_template=..." in said[0]

    @tool
    def weather(city: str) -> str:
        """The weather in a city."""
        return "sunny"

    chat = ChatRyzenAI(model=str(folder), execution="inline", temperature=0, max_tokens=6)
    answer = chat.bind_tools([weather]).invoke("weather in Paris?")
    assert answer.tool_calls == [] and isinstance(answer.content, str)  # the answer is text, as it came
    llm = RyzenAILLM(model=str(folder), execution="inline", temperature=0, max_new_tokens=4)
    assert llm.metadata.is_function_calling_model is False
    assert main(["info", str(folder)]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("chat format"))
    assert row == f"chat format       plain text: {first.format_message}"


def test_no_format_is_guessed_for_a_template_it_cannot_tell(copy_package):
    """A type without a family here (phi3) and a template of no known format: not taken for ChatML."""
    folder = _retyped(copy_package, "phi3", "phi3-own-template", PLAIN_TEMPLATE)
    template = ChatTemplate.for_package(ModelPackage.open(folder))
    assert template.family == "plain" and template.tool_call_markers is None


@pytest.mark.parametrize("execution", ["inline", "process"])
def test_a_type_the_runtime_refuses_is_named_with_the_runtime(copy_package, execution):
    folder = _retyped(copy_package, "gpt9", "future-model")
    engine = Engine.get(folder, execution=execution)
    try:
        with pytest.raises(UnsupportedModelError) as err:
            engine.generate([ChatMessage("user", "hi")], validated_options(max_new_tokens=2))
    finally:
        engine.close()
    message = str(err.value)
    assert message.startswith(f"{runtime_info().describe()} does not run model.type 'gpt9' of future-model: ")
    assert "Unsupported model_type in config.json: gpt9" in message and "Upgrade onnxruntime-genai" in message
