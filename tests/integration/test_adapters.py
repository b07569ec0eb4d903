"""LoRA adapters per call, through both faces, on the LoRA fixture (real onnxruntime-genai).

``tests/fixtures/models/tiny-qwen3-lora`` is tiny-qwen3's checkpoint built with its LoRA
weights as graph inputs, and two ``.onnx_adapter`` files (``lora.json``: the greedy tokens of
each, made by the builder with the adapter baked into the graph). A model object names its
adapters (``adapters={name: file}``); a call chooses one by name (LangChain ``bind`` or a
keyword, LlamaIndex a keyword, or the object's ``adapter``), None for the base model. The
worker loads each file once and checks it with a one-token run; the KV prefix cache is keyed
by the adapter; metadata names the adapter that ran.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import threading

import pytest
from langchain_core.messages import HumanMessage, SystemMessage
from llama_index.core.base.llms.types import ChatMessage, MessageRole

from conftest import MODELS, TINY_QWEN3
from langchain_ryzenai import ChatRyzenAI
from llamaindex_ryzenai import RyzenAILLM
from ryzenai_core import AdapterError, Engine, InvalidRequestError

LORA = MODELS / "tiny-qwen3-lora"
MANIFEST = json.loads((LORA / "lora.json").read_text(encoding="utf-8"))
ADAPTERS = {name: str(LORA / spec["file"]) for name, spec in MANIFEST["adapters"].items()}
RUNS = ("base", "alpha", "beta")
LC = [SystemMessage("Answer briefly."), HumanMessage("What runs on the NPU?")]
LI = [
    ChatMessage(role=MessageRole.SYSTEM, content="Answer briefly."),
    ChatMessage(role=MessageRole.USER, content="What runs on the NPU?"),
]


def chat_model(**kw) -> ChatRyzenAI:
    return ChatRyzenAI(**{"model": str(LORA), "adapters": ADAPTERS, "temperature": 0, "max_tokens": 12, **kw})


def llm(**kw) -> RyzenAILLM:
    return RyzenAILLM(**{"model": str(LORA), "adapters": ADAPTERS, "temperature": 0, "max_new_tokens": 12, **kw})


def choice(run: str) -> str | None:
    return None if run == "base" else run


@pytest.fixture(scope="module")
def reference() -> dict[str, str]:
    """Each run's answer to LC/LI, from the worker of a model object with no default adapter."""
    model = chat_model()
    return {run: model.invoke(LC, adapter=choice(run)).content for run in RUNS}


def test_each_adapter_gives_its_builds_tokens_and_no_adapter_the_base_models():
    """Raw prompts through LlamaIndex: the tokens the builder's graph with each adapter built in gives."""
    model = llm()
    engine = Engine.get(LORA)
    for run in RUNS:
        for prompt, tokens in zip(MANIFEST["prompts"], MANIFEST["greedy"][run], strict=True):
            response = model.complete(prompt, formatted=True, adapter=choice(run))
            assert response.text == engine.decode(tokens), (run, prompt)
            assert response.raw["adapter"] == choice(run)


def test_both_faces_answer_alike_with_each_adapter_and_the_base_is_the_plain_model(reference):
    assert len(set(reference.values())) == 3  # two adapters and the base: three answers
    assert ChatRyzenAI(model=str(TINY_QWEN3), temperature=0, max_tokens=12).invoke(LC).content == reference["base"]
    lc = chat_model()
    for run in RUNS:
        bound = lc.bind(adapter=choice(run)).invoke(LC)
        assert bound.content == reference[run] and bound.response_metadata["adapter"] == choice(run)
        streamed = list(lc.stream(LC, adapter=choice(run)))
        assert "".join(c.content for c in streamed) == reference[run]
        assert streamed[-1].response_metadata["adapter"] == choice(run)
        response = llm().chat(LI, adapter=choice(run))
        assert response.message.content == reference[run]
        assert response.raw["adapter"] == response.additional_kwargs["adapter"] == choice(run)
    default = llm(adapter="beta")  # the object's adapter, unless a call chooses another or None (the base)
    assert default.chat(LI).message.content == reference["beta"]
    assert default.chat(LI, adapter="alpha").message.content == reference["alpha"]
    assert default.chat(LI, adapter=None).message.content == reference["base"]
    assert chat_model(adapter="alpha").invoke(LC).response_metadata["adapter"] == "alpha"


def test_calls_with_different_adapters_at_once_on_one_model_object(reference):
    model = chat_model()
    got: dict[tuple[str, int], str] = {}

    def run(name: str, i: int) -> None:
        got[name, i] = model.invoke(LC, adapter=choice(name)).content

    threads = [threading.Thread(target=run, args=(name, i)) for i in range(2) for name in RUNS]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert got == {(name, i): reference[name] for i in range(2) for name in RUNS}

    async def together() -> list[str]:
        li = llm()
        calls = [li.achat(LI, adapter=choice(name)) for name in (*RUNS, *reversed(RUNS))]
        return [r.message.content for r in await asyncio.gather(*calls)]

    assert asyncio.run(together()) == [reference[n] for n in (*RUNS, *reversed(RUNS))]


def test_the_kv_cache_is_kept_per_adapter():
    """A call extending the previous call's prompt reuses its KV only when both ran with the same adapter."""
    system = "You answer questions about laptops. " + " ".join(f"fact{i} is true." for i in range(60))
    turns = [SystemMessage(system), HumanMessage("What runs on the NPU?")]
    longer = [*turns, HumanMessage("And on the CPU?")]
    warm = chat_model(execution="inline", kv_reuse=True, max_tokens=6)
    cold = chat_model(kv_reuse=False, max_tokens=6)  # another engine (the worker's): the warm one's cache stays

    def reused(message) -> int:
        return message.usage_metadata["input_token_details"]["cache_read"]

    first = warm.invoke(turns, adapter="alpha")
    assert reused(first) == 0
    switched = warm.invoke(longer, adapter="beta")  # alpha's cache: not beta's
    assert reused(switched) == 0
    assert switched.content == cold.invoke(longer, adapter="beta").content
    again = warm.invoke([*longer, HumanMessage("Thanks.")], adapter="beta")  # beta's cache, extended
    assert reused(again) >= 64
    assert again.content == cold.invoke([*longer, HumanMessage("Thanks.")], adapter="beta").content
    base = warm.invoke([*longer, HumanMessage("Thanks."), HumanMessage("Bye.")])
    assert reused(base) == 0 and base.response_metadata["adapter"] is None


def test_an_unknown_name_lists_the_adapters_the_model_object_has():
    with pytest.raises(
        InvalidRequestError, match=r"adapter='gamma' is not one of the adapters of this ChatRyzenAI: 'alpha', 'beta'"
    ):
        chat_model().bind(adapter="gamma").invoke(LC)
    with pytest.raises(
        InvalidRequestError, match=r"adapter='gamma' is not one of the adapters of this RyzenAILLM: 'alpha', 'beta'"
    ):
        llm().chat(LI, adapter="gamma")
    with pytest.raises(InvalidRequestError, match=r"none \(the model object has no adapters\)"):
        ChatRyzenAI(model=str(LORA)).invoke(LC, adapter="alpha")
    with pytest.raises(ValueError, match="'gamma' is not one of the adapters"):
        RyzenAILLM(model=str(LORA), adapters=ADAPTERS, adapter="gamma")
    with pytest.raises(ValueError, match="does not exist"):
        ChatRyzenAI(model=str(LORA), adapters={"gone": str(LORA / "adapters" / "gone.onnx_adapter")})


@pytest.fixture(scope="module")
def misfits(tmp_path_factory) -> dict[str, str]:
    """beta with its tensors renamed (another model's names), and a file that is no adapter."""
    ort = pytest.importorskip("onnxruntime")
    folder = tmp_path_factory.mktemp("misfits")
    params = ort.AdapterFormat.read_adapter(ADAPTERS["beta"]).get_parameters()
    renamed = ort.AdapterFormat()
    renamed.set_parameters({k.replace(".attn.", ".self_attn."): v for k, v in params.items()})
    renamed.export_adapter(str(folder / "renamed.onnx_adapter"))
    (folder / "peft.onnx_adapter").write_bytes(b'{"peft_type": "LORA", "r": 8}')
    return {"renamed": str(folder / "renamed.onnx_adapter"), "peft": str(folder / "peft.onnx_adapter")}


def test_a_file_that_does_not_fit_is_a_typed_error_when_first_loaded(misfits, reference):
    model = chat_model(adapters={**ADAPTERS, **misfits})
    with pytest.raises(AdapterError) as info:
        model.invoke(LC, adapter="renamed")
    text = str(info.value)
    assert "adapter 'renamed'" in text and "does not fit tiny-qwen3-lora" in text
    assert "model.layers.0.self_attn.q_proj.lora_A.weight is not an input of the model" in text
    assert "28 LoRA inputs are named like model.layers.0.attn" in text
    with pytest.raises(AdapterError, match="self_attn"):
        model.invoke(LC, adapter="renamed")  # the same file: the same error, not loaded again
    with pytest.raises(
        AdapterError, match=r"is not an onnxruntime adapter file \(\.onnx_adapter\).*olive convert-adapters"
    ):
        llm(adapters=misfits).chat(LI, adapter="peft")
    assert model.invoke(LC, adapter="beta").content == reference["beta"]  # the worker serves on
    assert model.invoke(LC).content == reference["base"]


def test_an_adapter_on_a_package_without_lora_inputs_says_so():
    plain = RyzenAILLM(model=str(TINY_QWEN3), adapters=ADAPTERS, max_new_tokens=4)
    with pytest.raises(AdapterError, match="tiny-qwen3 has no LoRA inputs.*Dynamic LoRA"):
        plain.chat(LI, adapter="alpha")
    assert plain.chat(LI).raw["adapter"] is None


def test_a_file_rebuilt_in_place_is_loaded_again(tmp_path, reference):
    path = tmp_path / "tuned.onnx_adapter"
    shutil.copy(ADAPTERS["alpha"], path)
    model = chat_model(adapters={"tuned": str(path)})
    assert model.invoke(LC, adapter="tuned").content == reference["alpha"]
    shutil.copy(ADAPTERS["beta"], path)  # a new fine-tune under the same name
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 1_000_000_000))
    assert model.invoke(LC, adapter="tuned").content == reference["beta"]


def test_doctor_checks_each_adapter_against_the_model(misfits, monkeypatch, capsys):
    """``doctor MODEL --adapter FILE``: the load a call would do, its error, or the fit and what the adapter changes.

    (The model's own checks run as in tests/integration/test_doctor.py; here they are left out.)
    """
    from ryzenai_cli import doctor
    from ryzenai_cli.main import main

    monkeypatch.setattr(doctor, "check_model", lambda *args, **kwargs: None)
    files = [ADAPTERS["alpha"], misfits["renamed"], misfits["peft"]]
    code = main(["doctor", str(LORA), *(a for f in files for a in ("--adapter", f)), "--json"])
    found = {c["name"]: (c["status"], c["detail"]) for c in json.loads(capsys.readouterr().out)["checks"]}
    assert code == 1
    status, detail = found["adapter alpha"]
    assert status == "ok"
    assert "fits tiny-qwen3-lora: its 28 tensors are inputs of the model (the graph has 28 LoRA inputs)" in detail
    assert "differ from the base model's" in detail
    assert (
        found["adapter renamed"][0] == "fail"
        and "self_attn.q_proj.lora_A.weight is not an input" in found["adapter renamed"][1]
    )
    assert found["adapter peft"][0] == "fail" and "not an onnxruntime adapter file" in found["adapter peft"][1]

    assert main(["doctor", str(TINY_QWEN3), "--adapter", ADAPTERS["beta"], "--json"]) == 1
    found = {c["name"]: (c["status"], c["detail"]) for c in json.loads(capsys.readouterr().out)["checks"]}
    assert found["adapter beta"][0] == "fail" and "tiny-qwen3 has no LoRA inputs" in found["adapter beta"][1]
