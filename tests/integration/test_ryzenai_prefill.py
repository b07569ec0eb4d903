"""What the engine does on Ryzen AI packages that only a laptop runs: long prompts and KV reuse.

The Gemma-3-4b 16K package as it is (the seed article on it): ``search.max_length`` 4096 and
``hybrid_opt_max_seq_length`` 4096, so every prompt it takes is one prefill run. A package whose
window is longer than one run feeds longer prompts in several runs only when it declares
chunked context (``hybrid_opt_chunk_context``, as AMD's long-context configs do) or the user
opts in (``RYZENAI_LLM_SPLIT_PREFILL=1``, unverified on the NPU); otherwise its prompt limit is
one run. onnxruntime-genai prefills a ``gemma3`` (multimodal) prompt in one run, so the engine
feeds text prompts in runs of at most 4096 tokens and limits prompts with images to one run.
Checked on copies of the replica with a 16K window, with the CPU provider, against a one-run
prefill in raw onnxruntime-genai.

KV reuse stays off by default on Ryzen AI packages; with ``kv_reuse=True`` a runtime that
refuses a rewind or an append is stood in for by a generator that raises as the runtime does
(everything else is the real CPU runtime): the call is answered cold, a warning is logged once
and reuse stays off for the model.
"""

from __future__ import annotations

import io
import json
import logging
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime_genai as og
import pytest
from PIL import Image

from conftest import REPLICAS, TINY_LLAMA
from ryzenai_core import ChatMessage, ContextWindowExceededError, Engine, InvalidRequestError, ModelPackage
from ryzenai_core.generation.session import Session
from ryzenai_core.messages import RawPrompt
from ryzenai_core.options import validated_options

GEMMA = REPLICAS / "Gemma-3-4b_rai_1.8.0_npu_16K"
RUN = 4096
NODE = "modellayers.0input_layernormMLADFRMSNORM"


def greedy(n: int = 8, reuse: bool | None = False):
    return validated_options(max_new_tokens=n, temperature=0, kv_reuse=reuse)


class Recording:
    """A real generator whose calls are recorded; ``refuse`` names a method that raises as a runtime refusing it."""

    def __init__(self, inner: Any, log: list[tuple[str, int]], refuse: str | None) -> None:
        self._inner, self._log, self._refuse = inner, log, refuse
        self._rewound = False

    def append_tokens(self, ids: Any) -> None:
        self._log.append(("append_tokens", len(ids)))
        if self._refuse == "append_tokens" and self._rewound:
            raise RuntimeError("AppendTokens is not supported by this execution provider after a rewind")
        self._inner.append_tokens(ids)

    def rewind_to(self, n: int) -> None:
        self._log.append(("rewind_to", n))
        if self._refuse == "rewind_to":
            raise RuntimeError("RewindTo is not supported by the RyzenAI execution provider")
        self._rewound = True
        self._inner.rewind_to(n)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


@pytest.fixture
def generators(monkeypatch) -> Any:
    """``generators(refuse=None)``: every ``og.Generator`` the engine makes is recorded; returns the call log."""

    def install(refuse: str | None = None) -> list[tuple[str, int]]:
        log: list[tuple[str, int]] = []
        real = og.Generator
        monkeypatch.setattr(og, "Generator", lambda model, params: Recording(real(model, params), log, refuse))
        return log

    return install


def png(color: str) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (64, 48), color).save(out, format="PNG")
    return out.getvalue()


# ---------------------------------------------------------------------- long prompts
def _config(folder: Path, edit) -> Path:
    cfg = json.loads((folder / "genai_config.json").read_text())
    edit(cfg)
    (folder / "genai_config.json").write_text(json.dumps(cfg))
    return folder


def _ryzenai(cfg: dict) -> dict:
    return cfg["model"]["decoder"]["session_options"]["provider_options"][0]["RyzenAI"]


@pytest.fixture
def gemma_16k(copy_package) -> Path:
    """The Gemma replica with a 16K window and chunked context declared, as AMD's long-context configs do."""

    def edit(cfg: dict) -> None:
        cfg["search"]["max_length"] = 16384
        _ryzenai(cfg)["hybrid_opt_chunk_context"] = "1"

    return _config(copy_package(GEMMA, "Gemma-3-4b_rai_1.8.0_npu_16K"), edit)


def test_the_gemma_package_as_it_is_takes_one_prefill_run():
    """Its search.max_length is 4096 (the seed): no prompt is longer than one run, no plan names a longer bucket."""
    pkg = ModelPackage.open(GEMMA)
    b = pkg.budget
    assert (b.window, b.prompt_limit, b.prefill_window, b.feed_window) == (RUN, RUN - 1, RUN, None)
    assert pkg.long_prompts["policy"] == "one run" and b.prefill_buckets_estimated
    assert b.decode_buckets == (256, 512, 1024, 2048, 3072, 4096) and pkg.missing_files == ()
    plan = b.plan(3000)
    assert plan.prefill_bucket == 3072 and plan.prefill_bucket_estimated
    assert plan.decode_buckets == [3072, 4096] and plan.decode_past_buckets == 0


def test_a_long_window_without_chunked_context_is_one_run_and_a_longer_prompt_names_the_setting(
    copy_package, monkeypatch
):
    folder = _config(
        copy_package(GEMMA, "Gemma-3-4b_rai_1.8.0_npu_16K"), lambda c: c["search"].__setitem__("max_length", 16384)
    )
    pkg = ModelPackage.open(folder)
    b = pkg.budget
    assert (b.window, b.prompt_limit, b.feed_window) == (16384, RUN, None) and pkg.long_prompts["policy"] == "capped"
    with pytest.raises(ContextWindowExceededError) as err:
        b.plan(6000)
    text = str(err.value)
    assert "prompt limit of 4096 tokens (hybrid_opt_max_seq_length 4096: one prefill run" in text
    assert "declares no hybrid_opt_chunk_context" in text and "RYZENAI_LLM_SPLIT_PREFILL=1 feeds longer prompts" in text
    assert err.value.limit == RUN
    monkeypatch.setenv("RYZENAI_LLM_SPLIT_PREFILL", "1")  # the documented opt-in
    opted = ModelPackage.open(folder)
    assert (opted.budget.prompt_limit, opted.budget.feed_window) == (16383, RUN)
    assert opted.long_prompts["policy"] == "windows" and "unverified on the NPU" in opted.long_prompts["detail"]
    assert opted.long_prompts["split_prefill_opt_in"] is True


def test_a_package_declaring_chunked_context_feeds_text_prompts_in_runs(gemma_16k):
    pkg = ModelPackage.open(gemma_16k)
    b = pkg.budget
    assert (b.prefill_window, b.feed_window, b.image_prompt_limit, b.prompt_limit) == (RUN, RUN, RUN, 16383)
    facts = pkg.describe()
    assert facts["long_prompts"]["policy"] == "windows" and facts["long_prompts"]["run_length"] == RUN
    assert "runs of at most 4096 tokens" in facts["long_prompts"]["detail"]
    assert "unverified" not in facts["long_prompts"]["detail"]
    assert facts["budget"]["feed_window"] == RUN


def test_no_plan_names_a_decode_bucket_the_package_lacks(gemma_16k):
    """A 6,000-token prompt on a package whose token buckets stop at 4096: no 6144 bucket is invented."""
    plan = ModelPackage.open(gemma_16k).budget.plan(6000, 200)
    assert plan.decode_buckets == [] and plan.decode_past_buckets == 6200 - 4096
    assert plan.prefill_windows == 2 and plan.prefill_bucket_estimated


def test_packages_whose_runtime_chunks_or_that_fit_one_run_are_fed_whole(copy_package):
    assert ModelPackage.open(REPLICAS / "Llama-3.2-1B_rai_1.8.0_hybrid").long_prompts["policy"] == "one run"
    assert ModelPackage.open(TINY_LLAMA).budget.feed_window is None

    def chunked(cfg: dict) -> None:  # AMD's text-only 16K configs: the runtime chunks by itself
        cfg["search"]["chunk_size"] = RUN
        _ryzenai(cfg)["hybrid_opt_chunk_context"] = "1"

    folder = _config(copy_package(REPLICAS / "SmolLM2-135M-Instruct-onnx-ryzenai-1.7-hybrid", "chunked"), chunked)
    pkg = ModelPackage.open(folder)
    assert pkg.long_prompts["policy"] == "runtime chunks" and pkg.budget.feed_window is None


def test_a_declared_sliding_window_caps_the_prompt_at_one_run(gemma_16k):
    """Fed in windows, a prefill past a declared sliding window would not be exact: one run's prompt instead."""
    folder = _config(
        gemma_16k,
        lambda c: c["model"]["decoder"].__setitem__(
            "sliding_window",
            {"window_size": 1024, "slide_key_value_cache": False, "slide_inputs": False, "layers": [0]},
        ),
    )
    pkg = ModelPackage.open(folder)
    assert pkg.budget.prompt_limit == RUN and pkg.budget.feed_window is None
    assert pkg.long_prompts["policy"] == "capped" and "sliding window" in pkg.budget.prompt_limit_source
    with pytest.raises(ContextWindowExceededError, match="hybrid_opt_max_seq_length 4096"):
        pkg.budget.plan(RUN + 1)


def test_a_token_fusion_package_without_its_blueprint_is_incomplete(copy_package):
    import shutil

    folder = copy_package(GEMMA, "Gemma-3-4b_rai_1.8.0_npu_16K")
    shutil.rmtree(folder / "cache")
    assert ModelPackage.open(folder).missing_files == ("cache/",)
    (folder / "cache").mkdir()
    assert ModelPackage.open(folder).missing_files == (f"cache/Token_{NODE}_meta.json",)


def _one_run(folder: Path, ids: list[int], n: int) -> tuple[np.ndarray, list[int]]:
    """Raw onnxruntime-genai on the replica (CPU): the prompt in one append, then ``n`` greedy tokens."""
    config = og.Config(str(folder))
    config.clear_providers()
    cleared = {"session_options": {"provider_options": []}}
    config.overlay(json.dumps({"model": {"vision": cleared, "embedding": cleared}}))
    model = og.Model(config)
    params = og.GeneratorParams(model)
    params.set_search_options(max_length=len(ids) + n, do_sample=False)
    gen = og.Generator(model, params)
    gen.append_tokens(ids)
    logits = np.asarray(gen.get_output("logits"))[0, -1].copy()
    out = []
    for _ in range(n):
        gen.generate_next_token()
        out.append(int(gen.get_next_tokens()[0]))
    return logits, out


@pytest.mark.slow
@pytest.mark.parametrize("length", [RUN + 1, 6000, 2 * RUN + 300])
def test_a_text_prompt_over_the_run_length_is_fed_in_runs_and_equals_a_one_run_prefill(
    generators, monkeypatch, gemma_16k, length
):
    log = generators()
    seen: list[np.ndarray] = []
    # Session's private _generator: the one place a prefill's logits can be read before decoding moves on
    make = Session._generator

    def recording(self, *args, **kwargs):
        generator, reused = make(self, *args, **kwargs)
        seen.append(np.asarray(generator.get_output("logits"))[0, -1].copy())
        return generator, reused

    monkeypatch.setattr(Session, "_generator", recording)
    engine = Engine.get(gemma_16k, provider="cpu", execution="inline")
    ids = [int(i) for i in np.random.default_rng(length).integers(20, 1000, length)]
    out = engine.generate(RawPrompt(token_ids=ids), greedy(6))
    runs = [n for name, n in log if name == "append_tokens"]
    assert sum(runs) == length and max(runs) <= RUN and len(runs) == -(-length // RUN)
    assert out.plan.prefill_windows == len(runs)
    logits, tokens = _one_run(gemma_16k, ids, 6)
    np.testing.assert_array_equal(seen[-1], logits)
    assert out.token_ids == tokens


def test_a_prompt_with_images_over_the_run_length_is_refused_before_it_runs(gemma_16k):
    engine = Engine.get(gemma_16k, provider="cpu", execution="inline")
    long_text = "tell me about the fox " * 450  # about 4,500 tokens
    msgs = [ChatMessage("user", [{"type": "image", "image": png("red")}, {"type": "text", "text": long_text}])]
    with pytest.raises(ContextWindowExceededError, match=r"limit of 4096 tokens for prompts with images") as info:
        engine.generate(msgs, greedy(4))
    assert info.value.limit == RUN and info.value.prompt_tokens > RUN
    text_only = engine.generate([ChatMessage("user", long_text)], greedy(4))
    assert text_only.usage.prompt_tokens > RUN and text_only.plan.prefill_windows == 2
    short = [ChatMessage("user", [{"type": "image", "image": png("red")}, {"type": "text", "text": "What is it?"}])]
    assert engine.generate(short, greedy(4)).usage.completion_tokens == 4


def test_info_says_how_long_prompts_and_kv_reuse_are_handled(capsys, gemma_16k):
    from ryzenai_cli.main import main

    assert main(["info", str(gemma_16k)]) == 0
    out = capsys.readouterr().out
    assert "long prompts" in out and "runs of at most 4096 tokens" in out
    assert "KV reuse" in out and "off by default" in out
    assert main(["info", str(REPLICAS.parent / "models" / "tiny-gemma3-sliding"), "--json"]) == 0
    facts = json.loads(capsys.readouterr().out)
    assert facts["sliding_window"] == 128 and facts["kv_reuse"]["default"] is True
    assert "within 128 tokens" in facts["kv_reuse"]["detail"]


# ---------------------------------------------------------------------- KV reuse on Ryzen AI
def conversation(answer: str = "A fox.") -> tuple[list[ChatMessage], list[ChatMessage]]:
    first = [ChatMessage("user", "What does the quick brown fox do? " * 12)]
    return first, [*first, ChatMessage("assistant", answer), ChatMessage("user", "And then?")]


def test_kv_reuse_is_off_by_default_on_ryzenai_packages(generators):
    log = generators()
    engine = Engine.get(GEMMA, provider="cpu", execution="inline")
    assert not engine.inline_session().kv_reuse_default()
    assert ModelPackage.open(GEMMA).describe()["kv_reuse"]["default"] is False
    first, second = conversation()
    engine.generate(first, greedy(4, reuse=None))
    again = engine.generate(second, greedy(4, reuse=None))
    assert again.timings.reused_prompt_tokens == 0 and not [c for c in log if c[0] == "rewind_to"]


@pytest.mark.parametrize("refuse", ["rewind_to", "append_tokens"])
def test_a_refused_rewind_or_append_falls_back_to_a_cold_generator_and_turns_reuse_off(
    generators, copy_package, caplog, refuse
):
    log = generators(refuse)
    engine = Engine.get(copy_package(GEMMA, "Gemma-3-4b_rai_1.8.0_npu_16K"), provider="cpu", execution="inline")
    first, second = conversation()
    cold = engine.generate(second, greedy(6))
    engine.generate(first, greedy(6, reuse=True))
    with caplog.at_level(logging.WARNING, logger="ryzenai_core"):
        warm = engine.generate(second, greedy(6, reuse=True))
        assert warm.token_ids == cold.token_ids and warm.timings.reused_prompt_tokens == 0
        later = engine.generate(
            [*second, ChatMessage("assistant", warm.text), ChatMessage("user", "Why?")], greedy(6, reuse=True)
        )
    assert later.timings.reused_prompt_tokens == 0
    assert [name for name, _ in log].count("rewind_to") == 1  # tried once, then reuse is off for the model
    warnings = [r.getMessage() for r in caplog.records if "refused to continue" in r.getMessage()]
    assert len(warnings) == 1 and "Gemma-3-4b_rai_1.8.0_npu_16K" in warnings[0] and "kv_reuse=False" in warnings[0]
    assert engine.inline_session().kv_cache.refused is not None


@pytest.mark.parametrize("model_type", ["phi3v", "decoder-pipeline", "whisper", "lfm2"])
def test_kv_reuse_true_is_refused_up_front_for_types_that_cannot_rewind(copy_package, model_type):
    folder: Path = copy_package(TINY_LLAMA, f"no-rewind-{model_type}")
    cfg = json.loads((folder / "genai_config.json").read_text())
    cfg["model"]["type"] = model_type
    (folder / "genai_config.json").write_text(json.dumps(cfg))
    engine = Engine.get(folder, execution="inline")
    with pytest.raises(InvalidRequestError, match=rf"kv_reuse=True .*model.type '{model_type}'.*pass kv_reuse=False"):
        engine.generate([ChatMessage("user", "hi")], greedy(2, reuse=True))
    assert not engine.inline_session().loaded  # refused before loading anything
    facts = ModelPackage.open(folder).describe()["kv_reuse"]
    assert facts["available"] is False and facts["default"] is False
