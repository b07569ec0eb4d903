"""The response metadata of both faces names the execution provider that ran the call.

The worker (or the in-process session) knows it once the model is loaded: onnxruntime-genai's
``Model.device_type`` (``RyzenAI`` on the NPU, ``CPU`` here).
"""

from __future__ import annotations

import pytest

from conftest import REPLICAS, TINY_LLAMA
from ryzenai_core import ChatMessage, Engine
from ryzenai_core.generation.loader import device_guess
from ryzenai_core.options import validated_options


@pytest.mark.parametrize("execution", ["inline", "process"])
def test_both_faces_name_the_provider_that_ran_the_call(execution):
    from llama_index.core.llms import ChatMessage as LlamaMessage

    from langchain_ryzenai import ChatRyzenAI
    from llamaindex_ryzenai import RyzenAILLM

    chat = ChatRyzenAI(model=str(TINY_LLAMA), execution=execution, temperature=0, max_tokens=3)
    assert chat.invoke("hi").response_metadata["execution_provider"] == "CPU"
    assert list(chat.stream("hi"))[-1].response_metadata["execution_provider"] == "CPU"
    llm = RyzenAILLM(model=str(TINY_LLAMA), execution=execution, temperature=0, max_new_tokens=3)
    response = llm.chat([LlamaMessage(role="user", content="hi")])
    assert response.raw["execution_provider"] == response.additional_kwargs["execution_provider"] == "CPU"
    assert llm.complete("hi").raw["execution_provider"] == "CPU"


def test_a_ryzenai_package_run_on_the_cpu_says_so():
    engine = Engine.get(REPLICAS / "Qwen3-4B_rai_1.8.0_npu_4K", provider="cpu", execution="inline")
    c = engine.generate([ChatMessage("user", "hi")], validated_options(max_new_tokens=2, temperature=0))
    assert c.provider == "CPU"


def test_the_device_of_a_runtime_without_device_type():
    assert device_guess(None, "RyzenAI") == "RyzenAI"
    assert device_guess("cpu", "RyzenAI") == device_guess(None, "cpu") == "CPU"
    assert device_guess("dml", "cpu") == "DML"
