"""The LoRA fixture on onnxruntime-genai itself: what per-call adapters will rely on.

``tests/fixtures/models/tiny-qwen3-lora`` (scripts/build_lora_fixture.py) is tiny-qwen3's
checkpoint built with LoRA paths whose weights are optional graph inputs, plus two
``.onnx_adapter`` files. On the runtime directly (``og.Adapters``, ``set_active_adapter``):
no adapter is the base model (the same tokens as the committed tiny-qwen3, which has no LoRA
paths), each adapter gives the tokens of the builder's graph with that adapter built in (in
``lora.json``, written by the build from those graphs), the two differ from each other and
from the base, and an adapter is a generator's alone: the next generator without one is the
base again. A file that does not fit the model loads and fails at the first run, so the
plugin has to check it when it loads it.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from conftest import MODELS, TINY_QWEN3

og = pytest.importorskip("onnxruntime_genai")

LORA = MODELS / "tiny-qwen3-lora"
MANIFEST = json.loads((LORA / "lora.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def model() -> og.Model:
    return og.Model(str(LORA))


@pytest.fixture(scope="module")
def adapters(model: og.Model) -> og.Adapters:
    loaded = og.Adapters(model)
    for name, spec in MANIFEST["adapters"].items():
        loaded.load(str(LORA / spec["file"]), name)
    return loaded


def greedy(model: og.Model, prompt: str, adapters: og.Adapters | None = None, name: str | None = None) -> list[int]:
    ids = list(og.Tokenizer(model).encode(prompt))
    params = og.GeneratorParams(model)
    params.set_search_options(max_length=len(ids) + MANIFEST["new_tokens"], do_sample=False)
    generator = og.Generator(model, params)
    if name is not None:
        generator.set_active_adapter(adapters, name)
    generator.append_tokens(ids)
    while not generator.is_done():
        generator.generate_next_token()
    return [int(t) for t in generator.get_sequence(0)[len(ids) :]]


def test_no_adapter_is_the_base_model(model):
    plain = og.Model(str(TINY_QWEN3))
    for prompt in MANIFEST["prompts"]:
        assert greedy(model, prompt) == greedy(plain, prompt)


def test_each_adapter_gives_its_builds_tokens_and_they_differ(model, adapters):
    runs: dict[str, list[list[int]]] = {"base": [greedy(model, p) for p in MANIFEST["prompts"]]}
    for name in MANIFEST["adapters"]:
        runs[name] = [greedy(model, p, adapters, name) for p in MANIFEST["prompts"]]
    assert runs == MANIFEST["greedy"]
    for i in range(len(MANIFEST["prompts"])):
        outputs = [tuple(run[i]) for run in runs.values()]
        assert len(set(outputs)) == len(outputs), f"prompt {i}: two of base and adapters agree"


def test_an_adapter_stays_with_its_generator(model, adapters):
    prompt = MANIFEST["prompts"][0]
    base = greedy(model, prompt)
    assert greedy(model, prompt, adapters, "alpha") != base
    assert greedy(model, prompt) == base  # the next generator without an adapter is the base again
    assert greedy(model, prompt, adapters, "beta") == MANIFEST["greedy"]["beta"][0]


def test_live_generators_keep_their_own_adapters(model, adapters):
    """The engine keeps one generator for KV reuse while others run: adapters must not leak between them."""
    prompt = MANIFEST["prompts"][1]
    ids = list(og.Tokenizer(model).encode(prompt))
    live = {}
    for name in [None, "alpha", "beta"]:
        params = og.GeneratorParams(model)
        params.set_search_options(max_length=len(ids) + MANIFEST["new_tokens"], do_sample=False)
        live[name] = og.Generator(model, params)
        if name is not None:
            live[name].set_active_adapter(adapters, name)
        live[name].append_tokens(ids)
    while not all(g.is_done() for g in live.values()):  # one token of each in turn
        for g in live.values():
            if not g.is_done():
                g.generate_next_token()
    got = {name or "base": [int(t) for t in g.get_sequence(0)[len(ids) :]] for name, g in live.items()}
    assert got == {name: runs[1] for name, runs in MANIFEST["greedy"].items()}


def test_a_misfit_adapter_loads_and_fails_at_the_first_run(model, tmp_path: Path):
    ort = pytest.importorskip("onnxruntime")
    name = "model.layers.0.attn.q_proj.lora_A.weight"  # [hidden=128, lora_r]
    misfits = {
        "shape": {name: np.ones((64, 4), np.float32)},
        "name": {"model.layers.9.attn.q_proj.lora_A.weight": np.ones((128, 4), np.float32)},
        "dtype": {name: np.ones((128, 4), np.float16)},
    }
    loaded = og.Adapters(model)
    for kind, weights in misfits.items():
        fmt = ort.AdapterFormat()
        fmt.set_parameters({k: ort.OrtValue.ortvalue_from_numpy(v) for k, v in weights.items()})
        fmt.export_adapter(str(tmp_path / f"{kind}.onnx_adapter"))
        loaded.load(str(tmp_path / f"{kind}.onnx_adapter"), kind)  # the runtime reads the file, nothing more
    with pytest.raises(RuntimeError, match="invalid dimensions"):
        greedy(model, "Hi", loaded, "shape")
    with pytest.raises(RuntimeError, match="Invalid input name"):
        greedy(model, "Hi", loaded, "name")
    with pytest.raises(RuntimeError, match="data type"):
        greedy(model, "Hi", loaded, "dtype")
    with pytest.raises(RuntimeError, match="Adapter not found"):
        greedy(model, "Hi", loaded, "gamma")
    (tmp_path / "garbage.onnx_adapter").write_bytes(b"not an adapter" * 8)
    with pytest.raises(RuntimeError, match="valid lora parameter format"):
        loaded.load(str(tmp_path / "garbage.onnx_adapter"), "garbage")
    assert greedy(model, MANIFEST["prompts"][0]) == MANIFEST["greedy"]["base"][0]  # the model still works


def test_an_adapter_on_a_model_without_lora_inputs_fails_at_the_first_run():
    plain = og.Model(str(TINY_QWEN3))
    loaded = og.Adapters(plain)
    loaded.load(str(LORA / MANIFEST["adapters"]["alpha"]["file"]), "alpha")
    with pytest.raises(RuntimeError, match="Invalid input name"):
        greedy(plain, "Hi", loaded, "alpha")
