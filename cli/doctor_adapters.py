"""``ryzenai-llm doctor MODEL --adapter FILE``: does a LoRA adapter fit the package, on this runtime?

Each file is loaded into the model's worker the way a call choosing it loads it (the runtime
reads the file, then one token runs with it set: onnxruntime-genai checks an adapter's tensors
only when it runs). ``ok`` says how many tensors the file sets, how many LoRA inputs the
package's graph has, and whether a short greedy answer with the adapter differs from the base
model's (an adapter whose ``lora_B`` weights are still zero, as PEFT starts them, changes
nothing); ``fail`` is the error a call would get: a file that is no adapter, a tensor the graph
has no input for (a package built without LoRA inputs says so), or of another size or type.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ryzenai_core.errors import RyzenAIError

from .doctor_report import Report

__all__ = ["check_adapters"]

PROMPT = "Say hello in one short sentence."
TOKENS = 8


def check_adapters(report: Report, model: str | None, files: Sequence[str], provider: str | None) -> None:
    """One ``adapter <file>`` check per file, on ``model`` (with ``provider``, or the one the model checks chose)."""
    if not files:
        return
    if model is None:
        report.add("adapter", "fail", "an adapter is checked against a model: ryzenai-llm doctor MODEL --adapter FILE")
        return
    from ryzenai_core.adapters import LoraAdapter
    from ryzenai_core.embeddings.package import is_embedding_folder
    from ryzenai_core.engine.engine import Engine
    from ryzenai_core.package.hub import resolve_model
    from ryzenai_core.rerank.package import is_rerank_folder

    names = [f"adapter {_stem(f)}" for f in files]
    loads = ("package", "package files", "load")
    unloaded = next((c for c in report.checks if c.name in loads and c.status == "fail"), None)
    if unloaded is not None:
        for name in names:
            report.add(name, "skip", f"the model did not load (see the {unloaded.name!r} check)")
        return
    try:
        path = resolve_model(model)
    except RyzenAIError as exc:
        report.add(names[0], "fail", str(exc))
        return
    if is_embedding_folder(path) or is_rerank_folder(path):
        for name in names:
            report.add(name, "skip", "LoRA adapters run on LLM packages; this is an encoder")
        return
    if provider is None and any(c.name == "NPU load" for c in report.checks):
        provider = "cpu"  # the model checks ran its plain ONNX weights on the CPU
    engine = Engine.get(path, provider=provider)
    try:
        base = None
        for name, file in zip(names, files, strict=True):
            try:
                adapter = LoraAdapter.of(file)
                facts = engine.load_adapter(adapter)
                if base is None:
                    base = _answer(engine, None)
                same = _answer(engine, adapter) == base
            except RyzenAIError as exc:
                report.add(name, "fail", str(exc))
                continue
            report.add(name, "ok", _fits(engine.package.name, adapter, facts, same))
    finally:
        engine.close()


def _answer(engine: Any, adapter: Any) -> list[int]:
    from ryzenai_core.messages import ChatMessage
    from ryzenai_core.options import validated_options

    options = validated_options(max_new_tokens=TOKENS, temperature=0, kv_reuse=False, adapter=adapter)
    return list(engine.generate([ChatMessage("user", PROMPT)], options).token_ids)


def _fits(package: str, adapter: Any, facts: dict[str, int | None], same: bool) -> str:
    tensors, inputs = facts.get("tensors"), facts.get("lora_inputs")
    counted = f"its {tensors} tensors" if tensors is not None else "its tensors"
    of = f" (the graph has {inputs} LoRA inputs)" if inputs is not None else ""
    answer = (
        f"its first {TOKENS} greedy tokens are the base model's: an adapter whose lora_B weights are zero (as PEFT "
        "starts them) changes nothing"
        if same
        else f"its first {TOKENS} greedy tokens differ from the base model's"
    )
    return f"{adapter.path} fits {package}: {counted} are inputs of the model{of} and a run with it set ran; {answer}"


def _stem(file: str) -> str:
    from pathlib import Path

    return Path(file).stem
