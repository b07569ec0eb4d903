"""Build ``tests/fixtures/models/tiny-qwen3-lora``: a tiny random Qwen3 made for LoRA adapters, and two adapters.

onnxruntime-genai runs several LoRA adapters on one base model (``og.Adapters(model)``,
``adapters.load(file, name)``, ``generator.set_active_adapter(adapters, name)``). An adapter is
an ``.onnx_adapter`` file (onnxruntime's adapter format: named tensors) whose tensors are fed
to graph inputs of the same names, so the base model must be built with the LoRA paths in its
graph and their weights as inputs. This is the layout Olive's ``ExtractAdapters`` pass gives
(``olive auto-opt --adapter_path ...`` then ``olive convert-adapters``), made here with
onnxruntime-genai's own model builder and onnxruntime's ``AdapterFormat``:

1. a random Qwen3 checkpoint (the one ``tiny-qwen3`` is made from: same family, shape, seed)
   and two random PEFT LoRA adapters: ``alpha`` (rank 4 on every projection) and ``beta``
   (rank 8 on the attention projections only);
2. the builder with ``adapter_path`` (int4, CPU) writes each adapter's LoRA paths into the
   graph (``MatMul(lora_A) -> MatMul(lora_B) -> Add`` beside each projection, ``lora_B``
   already multiplied by ``alpha / r``), the LoRA MatMuls kept in float (``nodes_to_exclude``)
   as a quantized base with float adapters is what a fine-tune of a shipped int4 model has;
3. the base: the ``alpha`` graph with every LoRA weight turned into an optional graph input
   whose rank dimension is dynamic (``lora_r``) and whose default is an empty (rank 0)
   tensor, so without an adapter the LoRA paths add zeros and the model is the base model;
4. each adapter: its LoRA weights, as the builder wrote them, saved with
   ``onnxruntime.AdapterFormat`` under the base's input names, which are Olive's
   (``model.layers.0.attn.q_proj.lora_A.weight``). ``beta`` covers a subset of the inputs;
   the others keep their empty defaults.

The script checks its output before writing it: greedy tokens of the base with no adapter are
those of the same checkpoint built without LoRA paths, and with each adapter those of the
builder's graph with that adapter built in. The token lists land in ``lora.json`` beside the
model, the reference the tests compare with.

Needs the ``fixtures`` extra; tests and CI use the committed output. ``build_fixtures.py`` runs it
after tiny-qwen3, whose checkpoint it shares.

    python scripts/build_lora_fixture.py       # about 40 s
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import build_fixtures as bf  # noqa: E402  (sibling script)

OUT = bf.MODELS / "tiny-qwen3-lora"
ATTENTION = ["q_proj", "k_proj", "v_proj", "o_proj"]
MLP = ["gate_proj", "up_proj", "down_proj"]
RANK_DIM = "lora_r"
#: Prompts (token ids of plain text, no template) and the length of the greedy runs checked on them.
PROMPTS = ["The quick brown fox", "Rats are awesome pets and"]
NEW_TOKENS = 12


@dataclass(frozen=True)
class Adapter:
    name: str
    seed: int
    rank: int
    alpha: int
    targets: list[str]


ADAPTERS = [
    Adapter("alpha", seed=11, rank=4, alpha=8, targets=ATTENTION + MLP),
    Adapter("beta", seed=22, rank=8, alpha=8, targets=ATTENTION),
]


def make_peft_adapter(hf: Path, spec: Adapter, out: Path) -> None:
    """A PEFT LoRA adapter for the checkpoint in ``hf`` with random A and B (PEFT starts B at zero: no effect)."""
    import torch
    import transformers
    from peft import LoraConfig, get_peft_model

    base = transformers.AutoModelForCausalLM.from_pretrained(hf)
    config = LoraConfig(r=spec.rank, lora_alpha=spec.alpha, target_modules=spec.targets, lora_dropout=0.0)
    model = get_peft_model(base, config)
    generator = torch.Generator().manual_seed(spec.seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_A" in name or "lora_B" in name:
                param.copy_(torch.randn(param.shape, generator=generator) * 0.3)
    model.save_pretrained(out)


def lora_matmuls(model) -> list:  # noqa: ANN001  (an onnx.ModelProto)
    """The LoRA MatMul nodes the builder wrote (``.../lora_A/MatMul``, ``.../lora_B/MatMul``)."""
    return [n for n in model.graph.node if n.op_type == "MatMul" and ("/lora_A/" in n.name or "/lora_B/" in n.name)]


def build_with_adapter(hf: Path, peft: Path, work: Path) -> Path:
    """The builder's int4 graph with ``peft`` built in, its LoRA MatMuls in float, the fixtures' logit bias added."""
    probe, build = work / "probe", work / "onnx"
    bf.run_builder(hf, probe, work / "cache", [f"adapter_path={peft}"], precision="fp32")
    import onnx

    names = [n.name for n in lora_matmuls(onnx.load(str(probe / "model.onnx"), load_external_data=False))]
    if not names:
        raise RuntimeError(f"the builder wrote no LoRA MatMul for {peft}")
    bf.run_builder(hf, build, work / "cache", [f"adapter_path={peft}", "nodes_to_exclude=" + ",".join(names)])
    bf.add_logit_bias(build, bf.invalid_utf8_ids(hf / "tokenizer.json"), bf.VOCAB)
    return build


def input_name(node) -> str:  # noqa: ANN001  (an onnx.NodeProto)
    """The graph input (and adapter tensor) name of a LoRA MatMul's weight, as Olive's ExtractAdapters names it.

    ``/model/layers.0/attn/q_proj/lora_A/MatMul`` -> ``model.layers.0.attn.q_proj.lora_A.weight``.
    """
    return ".".join([*node.name.lstrip("/").split("/")[:-1], "weight"])


def lora_weights(model_path: Path) -> dict:
    """The LoRA weight tensors (input name -> numpy array) of a graph the builder wrote with an adapter."""
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(model_path))
    inits = {i.name: i for i in model.graph.initializer}
    return {input_name(n): numpy_helper.to_array(inits[n.input[1]]) for n in lora_matmuls(model)}


def make_inputs(model_path: Path) -> list[str]:
    """Turn the graph's LoRA weights into optional inputs with a dynamic rank and an empty default."""
    import numpy as np
    import onnx
    from onnx import helper, numpy_helper

    model = onnx.load(str(model_path))
    graph = model.graph
    inits = {i.name: i for i in graph.initializer}
    kept = []
    for node in lora_matmuls(model):
        init = inits.pop(node.input[1])
        array = numpy_helper.to_array(init)
        rank_axis = 1 if "/lora_A/" in node.name else 0  # lora_A is [in, r], lora_B is [r, out]
        empty_shape = list(array.shape)
        empty_shape[rank_axis] = 0
        name = input_name(node)
        node.input[1] = name
        graph.initializer.remove(init)
        graph.initializer.append(numpy_helper.from_array(np.zeros(empty_shape, dtype=array.dtype), name))
        dims: list[int | str] = list(array.shape)
        dims[rank_axis] = RANK_DIM
        graph.input.append(helper.make_tensor_value_info(name, init.data_type, dims))
        kept.append(name)
    (model_path.parent / "model.onnx.data").unlink()  # onnx.save appends to an existing data file
    onnx.save(model, str(model_path), save_as_external_data=True, location="model.onnx.data", size_threshold=0)
    return sorted(kept)


def export_adapter(weights: dict, path: Path) -> None:
    import onnxruntime as ort

    fmt = ort.AdapterFormat()
    fmt.set_adapter_version(1)
    fmt.set_model_version(1)
    fmt.set_parameters({name: ort.OrtValue.ortvalue_from_numpy(array) for name, array in weights.items()})
    fmt.export_adapter(str(path))


def greedy(folder: Path, adapter: Path | None = None) -> list[list[int]]:
    """Greedy continuations of PROMPTS (token ids), on the CPU build of onnxruntime-genai."""
    import onnxruntime_genai as og

    model = og.Model(str(folder))
    tokenizer = og.Tokenizer(model)
    adapters = None
    if adapter is not None:
        adapters = og.Adapters(model)
        adapters.load(str(adapter), "a")
    runs = []
    for prompt in PROMPTS:
        ids = list(tokenizer.encode(prompt))
        params = og.GeneratorParams(model)
        params.set_search_options(max_length=len(ids) + NEW_TOKENS, do_sample=False)
        generator = og.Generator(model, params)
        if adapters is not None:
            generator.set_active_adapter(adapters, "a")
        generator.append_tokens(ids)
        while not generator.is_done():
            generator.generate_next_token()
        runs.append([int(t) for t in generator.get_sequence(0)[len(ids) :]])
    return runs


def runnable(build: Path, fam: bf.Family, ids: dict, tcfg: dict, out: Path) -> Path:
    bf.finish_folder(fam, build, out, ids, tcfg)
    return out


def main() -> None:
    fam = bf.QWEN3
    bf.log(f"building {OUT.relative_to(bf.ROOT)} (qwen3 with LoRA inputs, adapters {[a.name for a in ADAPTERS]})")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        hf = work / "hf"
        ids, tcfg = bf.make_checkpoint(fam, hf)

        plain = work / "plain"
        bf.run_builder(hf, plain, work / "cache")
        bf.add_logit_bias(plain, bf.invalid_utf8_ids(hf / "tokenizer.json"), bf.VOCAB)
        reference = {"base": greedy(runnable(plain, fam, ids, tcfg, work / "plain-folder"))}

        builds: dict[str, Path] = {}
        for spec in ADAPTERS:
            peft = work / f"peft-{spec.name}"
            make_peft_adapter(hf, spec, peft)
            builds[spec.name] = build_with_adapter(hf, peft, work / spec.name)
            reference[spec.name] = greedy(runnable(builds[spec.name], fam, ids, tcfg, work / f"{spec.name}-folder"))

        # The base: the first adapter's graph (every projection has LoRA paths) with its LoRA weights as inputs.
        first = ADAPTERS[0].name
        base_build = work / "base"
        shutil.copytree(builds[first], base_build)
        inputs = make_inputs(base_build / "model.onnx")
        staged = work / "staged"
        bf.finish_folder(fam, base_build, staged, ids, tcfg)
        (staged / "adapters").mkdir()
        for spec in ADAPTERS:
            weights = lora_weights(builds[spec.name] / "model.onnx")
            unknown = sorted(set(weights) - set(inputs))
            if unknown:
                raise RuntimeError(f"adapter {spec.name} has weights the base has no input for: {unknown[:3]}")
            export_adapter(weights, staged / "adapters" / f"{spec.name}.onnx_adapter")

        got = {"base": greedy(staged)}
        for spec in ADAPTERS:
            got[spec.name] = greedy(staged, staged / "adapters" / f"{spec.name}.onnx_adapter")
        if got != reference:
            raise RuntimeError(f"the LoRA base does not reproduce its references:\n{got}\n!=\n{reference}")
        outputs = [json.dumps(v) for v in got.values()]
        if len(set(outputs)) != len(outputs):
            raise RuntimeError(f"two of base and adapters give the same greedy tokens: {got}")

        manifest = {
            "about": "Greedy continuations (token ids) of each prompt: 'base' from the same checkpoint built "
            "without LoRA paths, each adapter's from the builder's graph with that adapter built in.",
            "prompts": PROMPTS,
            "new_tokens": NEW_TOKENS,
            "adapters": {
                spec.name: {"file": f"adapters/{spec.name}.onnx_adapter", "rank": spec.rank, "targets": spec.targets}
                for spec in ADAPTERS
            },
            "lora_inputs": len(inputs),
            "greedy": reference,
        }
        (staged / "lora.json").write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
        if OUT.exists():
            shutil.rmtree(OUT)
        shutil.copytree(staged, OUT)
    bf.log(f"{OUT.relative_to(bf.ROOT)}: {len(inputs)} LoRA inputs, adapters checked against their builds")


if __name__ == "__main__":
    main()
