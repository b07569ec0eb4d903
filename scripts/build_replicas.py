"""Write replica folders of AMD's Ryzen AI model packages, with tiny weights.

Each replica keeps what the plugin reads from a real package: the folder name, the
genai_config.json layout and Ryzen AI provider options, rai_config.json, the
``dd_metastate_*`` bucket file names (empty files), ``cache/*_meta.json`` blueprints, and
the other files AMD ships, as named in the project's package notes. Weights come from the
tiny fixture models (``tests/fixtures/models``), so the model dimensions in a runnable
replica's genai_config.json are those of the tiny model; everything else is as shipped.
Replicas of layouts that only an old Ryzen AI runtime can parse (1.4, 1.6) keep their real
genai_config.json unchanged: they are for inspection, not for running on the CPU.

Run by ``build_fixtures.py``; needs only the standard library once the models exist.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import zipfile
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODELS = ROOT / "tests" / "fixtures" / "models"
REPLICAS = ROOT / "tests" / "fixtures" / "replicas"
NODE = "modellayers.0input_layernormMLADFRMSNORM"

PREFILL_4K = [128, 256, 512, 768, 1024, 1536, 2048, 2304, 3072, 4096]
TOKEN_4K = [256, 512, 1024, 2048, 3072, 4096]
RAI_LLAMA = {"1.3.1": 2048, "1.4.0": 2048, "1.4.1": 2048, "1.5.0": 2048, "1.5.1": 2048, "1.6.0": 4096, "1.7.1": 4096}
RAI_QWEN3 = {"1.5.1": 2048, "1.6.0": 4096, "1.7.1": 4096}
SHAPE_KEYS = ("head_size", "hidden_size", "num_attention_heads", "num_hidden_layers", "num_key_value_heads")


def _write_json(path: Path, data: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=4) + "\n", encoding="utf-8")


def _touch(folder: Path, names: Iterable[str]) -> None:
    for name in names:
        p = folder / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(b"")


def _lfs_pointer(content: bytes) -> str:
    oid = hashlib.sha256(content).hexdigest()
    return f"version https://git-lfs.github.com/spec/v1\noid sha256:{oid}\nsize {len(content)}\n"


def _bucket_files(prefill: list[int], token: list[int]) -> list[str]:
    names = []
    for n in prefill:
        names += [
            f"dd_metastate_Llm_Prefill_{NODE}_sequence_length_padded_{n}_.{ext}" for ext in ("meta", "ctrlpkt", "super")
        ]
    for n in token:
        names += [
            f"dd_metastate_Llm_Token_Token_{NODE}_attention_mask_padded_{n}_.{ext}"
            for ext in ("meta", "ctrlpkt", "super")
        ]
    if prefill:
        names += [f"dd_metastate_Llm_Prefill_{NODE}.fconst", f"dd_metastate_Llm_Prefill_{NODE}.state"]
    if token:
        names += [f"dd_metastate_Llm_Token_Token_{NODE}.fconst", f"dd_metastate_Llm_Token_Token_{NODE}.state"]
    return names


def _blueprints(folder: Path, heads: int, kv_heads: int, head_size: int, layers: int, *, prefill: bool = True) -> None:
    ops = [
        {"op": "MLADFRMSNORM", "count": 1},
        {"op": "MladfMatMul", "count": 5 * layers + 1},
        {
            "op": "FLATMHA",
            "count": layers,
            "attrs": {"num_heads": heads, "kv_num_heads": kv_heads, "scale": head_size**-0.5, "do_rotary": 1},
        },
        {"op": "FlatRMSAdd", "count": 2 * layers},
        {"op": "FlatMLP", "count": layers},
    ]
    if prefill:
        _write_json(folder / "cache" / f"{NODE}_meta.json", {"ops": ops})
    token_ops = [dict(o) for o in ops]
    token_ops[2] = {**ops[2], "attrs": {**ops[2]["attrs"], "total_seq_len": 4096}}
    _write_json(folder / "cache" / f"Token_{NODE}_meta.json", {"ops": token_ops})


def _copy_weights(src: Path, dst: Path, onnx_name: str = "model.onnx") -> None:
    shutil.copy2(src / "model.onnx", dst / onnx_name)
    shutil.copy2(src / "model.onnx.data", dst / "model.onnx.data")


def _copy_tokenizer(src: Path, dst: Path, *, template_file: bool) -> None:
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        shutil.copy2(src / name, dst / name)
    if template_file:
        shutil.copy2(src / "chat_template.jinja", dst / "chat_template.jinja")


def _genai_config(
    tiny: Path,
    *,
    model_type: str,
    context_length: int,
    filename: str,
    session_options: dict,
    search: dict,
    extra_model: dict | None = None,
) -> dict:
    """A Ryzen AI genai_config.json whose decoder shape matches the tiny weights."""
    base = json.loads((tiny / "genai_config.json").read_text(encoding="utf-8"))
    dec = base["model"]["decoder"]
    decoder = {
        "session_options": {"log_id": "onnxruntime-genai", **session_options},
        "filename": filename,
        **{k: dec[k] for k in SHAPE_KEYS},
        "inputs": dec["inputs"],
        "outputs": dec["outputs"],
    }
    model = {
        "bos_token_id": base["model"].get("bos_token_id"),
        "context_length": context_length,
        "decoder": decoder,
        "eos_token_id": base["model"]["eos_token_id"],
        "pad_token_id": base["model"]["pad_token_id"],
        "type": model_type,
        "vocab_size": base["model"]["vocab_size"],
        **(extra_model or {}),
    }
    if model["bos_token_id"] is None:
        del model["bos_token_id"]
    full_search = {
        "diversity_penalty": 0.0,
        "do_sample": True,
        "early_stopping": True,
        "length_penalty": 1.0,
        "max_length": 4096,
        "min_length": 0,
        "no_repeat_ngram_size": 0,
        "num_beams": 1,
        "num_return_sequences": 1,
        "past_present_share_buffer": True,
        "repetition_penalty": 1.0,
        "temperature": 1.0,
        "top_k": 50,
        "top_p": 1.0,
    }
    full_search.update(search)
    return {"model": model, "search": full_search}


def _common_llama_files(folder: Path, name: str) -> None:
    _write_json(
        folder / "config.json",
        {
            "architectures": ["LlamaForCausalLM"],
            "model_type": "llama",
            "hidden_size": 2048,
            "num_hidden_layers": 16,
            "num_attention_heads": 32,
            "num_key_value_heads": 8,
            "head_dim": 64,
            "max_position_embeddings": 131072,
            "rope_theta": 500000.0,
            "rope_scaling": {
                "factor": 32.0,
                "high_freq_factor": 4.0,
                "low_freq_factor": 1.0,
                "original_max_position_embeddings": 8192,
                "rope_type": "llama3",
            },
            "quantization_config": {
                "quant_method": "quark",
                "global_quant_config": {"weight": {"dtype": "uint4", "group_size": 128, "symmetric": False}},
            },
        },
    )
    _write_json(
        folder / "params.json",
        {"dim": 2048, "n_layers": 16, "n_heads": 32, "n_kv_heads": 8, "rope_theta": 500000.0, "norm_eps": 1e-05},
    )
    _write_json(
        folder / "generation_config.json",
        {
            "bos_token_id": 128000,
            "do_sample": True,
            "eos_token_id": [128001, 128008, 128009],
            "temperature": 0.6,
            "top_p": 0.9,
        },
    )
    (folder / "README.md").write_text(
        f"# {name}\n\nReplica of AMD's package for tests: real file names and config layout, tiny random weights.\n"
        "Quantization of the real package: AWQ / Group 128 / Asymmetric / BFP16 activations / UINT4 weights.\n",
        encoding="utf-8",
    )
    (folder / "USE_POLICY.md").write_text(
        "Llama 3.2 Acceptable Use Policy (placeholder in this replica).\n", encoding="utf-8"
    )
    (folder / ".gitattributes").write_text(
        "*.onnx.data filter=lfs diff=lfs merge=lfs -text\n*.bin filter=lfs diff=lfs merge=lfs -text\n"
        "dd_metastate_* filter=lfs diff=lfs merge=lfs -text\n",
        encoding="utf-8",
    )


def llama_npu_4k(name: str = "Llama-3.2-1B_rai_1.8.0_npu_4K") -> Path:
    tiny = MODELS / "tiny-llama"
    folder = REPLICAS / name
    folder.mkdir(parents=True)
    _copy_weights(tiny, folder)
    _copy_tokenizer(tiny, folder, template_file=False)
    _write_json(
        folder / "genai_config.json",
        _genai_config(
            tiny,
            model_type="llama",
            context_length=131072,
            filename="model.onnx",
            session_options={"provider_options": [{"RyzenAI": {"hybrid_opt_token_backend": "npu"}}]},
            search={"temperature": 0.6, "top_k": 50, "top_p": 0.9, "max_length": 4096},
        ),
    )
    _write_json(folder / "rai_config.json", {"max_prompt_length": RAI_LLAMA})
    _touch(folder, _bucket_files(PREFILL_4K, TOKEN_4K))
    _blueprints(folder, 32, 8, 64, 16)
    _common_llama_files(folder, name)
    return folder


def qwen3_npu_4k() -> Path:
    tiny = MODELS / "tiny-qwen3"
    folder = REPLICAS / "Qwen3-4B_rai_1.8.0_npu_4K"
    folder.mkdir(parents=True)
    _copy_weights(tiny, folder)
    _copy_tokenizer(tiny, folder, template_file=False)
    _write_json(
        folder / "genai_config.json",
        _genai_config(
            tiny,
            model_type="qwen3",
            context_length=40960,
            filename="model.onnx",
            session_options={"provider_options": [{"RyzenAI": {"hybrid_opt_token_backend": "npu"}}]},
            search={"temperature": 0.6, "top_k": 20, "top_p": 0.95, "max_length": 4096},
        ),
    )
    _write_json(folder / "rai_config.json", {"max_prompt_length": RAI_QWEN3})
    _touch(folder, _bucket_files(PREFILL_4K, TOKEN_4K))
    _blueprints(folder, 32, 8, 128, 36)
    _write_json(
        folder / "config.json",
        {
            "architectures": ["Qwen3ForCausalLM"],
            "model_type": "qwen3",
            "hidden_size": 2560,
            "num_hidden_layers": 36,
            "num_attention_heads": 32,
            "num_key_value_heads": 8,
            "head_dim": 128,
            "max_position_embeddings": 40960,
            "vocab_size": 151936,
            "quantization_config": {
                "quant_method": "quark",
                "global_quant_config": {"weight": {"dtype": "uint4", "group_size": 128, "symmetric": False}},
            },
        },
    )
    (folder / "README.md").write_text(
        "# Qwen3-4B_rai_1.8.0_npu_4K\n\nReplica for tests: Full Fusion 4K context; "
        "Quark quantization -> OGA build -> NPU post-processing; tiny random weights.\n",
        encoding="utf-8",
    )
    return folder


def gemma3_npu_16k() -> Path:
    """Token Fusion, multimodal: decoder on ``inputs_embeds``, embedding and vision models.

    As the article on the real package (the project's seed) describes it: ``search.max_length``
    4096 (the "16K" of the name is not what its config allows), ``hybrid_opt_max_seq_length``
    4096 and no chunked context, token buckets 256..4096, the token phase's blueprint in
    ``cache/``, ``genai_config_bkp.json`` differing only in ``past_present_share_buffer``, the
    NPU vision states in ``partitioned/``. Weights, processor_config.json and tokenizer come from
    ``tiny-gemma3-vision``; only the decoder carries Ryzen AI provider options, so
    ``provider="cpu"`` runs all three models.
    """
    tiny = MODELS / "tiny-gemma3-vision"
    folder = REPLICAS / "Gemma-3-4b_rai_1.8.0_npu_16K"
    folder.mkdir(parents=True)
    _copy_weights(tiny, folder)
    _copy_tokenizer(tiny, folder, template_file=True)
    for name in ("gemma-3-embedding.onnx", "gemma-3-vision.onnx", "processor_config.json"):
        shutil.copy2(tiny / name, folder / name)
    rai = {
        "hybrid_opt_max_seq_length": "4096",
        "hybrid_dbg_use_flash_mha": "1",
        "external_data_file": "model.pb.bin",
        "hybrid_opt_token_backend": "npu",
        "fusion_opt_io_bind_kv_cache": "1",
    }
    small = json.loads((tiny / "genai_config.json").read_text(encoding="utf-8"))["model"]
    extra = {key: small[key] for key in ("embedding", "vision", "image_token_id")}
    cfg = _genai_config(
        tiny,
        model_type="gemma3",
        context_length=131072,
        filename="model.onnx",
        session_options={"provider_options": [{"RyzenAI": rai}]},
        search={"top_k": 1, "top_p": 0.95, "max_length": 4096, "past_present_share_buffer": True},
        extra_model=extra,
    )
    _write_json(folder / "genai_config.json", cfg)
    bkp = json.loads(json.dumps(cfg))
    bkp["search"]["past_present_share_buffer"] = False
    _write_json(folder / "genai_config_bkp.json", bkp)
    (folder / "model.pb.bin").write_bytes(b"\x00" * 16)
    _touch(folder, _bucket_files([], TOKEN_4K))
    _blueprints(folder, 8, 4, 256, 34, prefill=False)
    _touch(
        folder,
        [
            "partitioned/dd_metastate_Llm_Vision_Attention_0.state",
            "partitioned/dd_metastate_Llm_Vision_node_type_as_1_Q4.state",
        ],
    )
    (folder / "README.md").write_text(
        "# Gemma-3-4b_rai_1.8.0_npu_16K\n\nReplica for tests: Token Fusion, CPU+NPU; search.max_length "
        "4096 and hybrid_opt_max_seq_length 4096, as the real package's config; text decoder on inputs_embeds, "
        "gemma-3-embedding.onnx and gemma-3-vision.onnx (896x896 images, 256 tokens each), "
        "tiny random weights.\n"
        "Quantization of the real package: AWQ / Group 128 / Asymmetric / BFP16 activations / UINT4 weights.\n",
        encoding="utf-8",
    )
    return folder


def llama_hybrid() -> Path:
    tiny = MODELS / "tiny-llama"
    name = "Llama-3.2-1B_rai_1.8.0_hybrid"
    folder = REPLICAS / name
    folder.mkdir(parents=True)
    _copy_weights(tiny, folder)
    _copy_tokenizer(tiny, folder, template_file=False)
    _write_json(
        folder / "genai_config.json",
        _genai_config(
            tiny,
            model_type="llama",
            context_length=131072,
            filename="model.onnx",
            session_options={
                "provider_options": [
                    {"RyzenAI": {"external_data_file": "model.pb.bin", "hybrid_opt_max_seq_length": "4096"}}
                ]
            },
            search={"temperature": 0.6, "top_p": 0.9, "max_length": 4096},
        ),
    )
    _write_json(folder / "rai_config.json", {"max_prompt_length": RAI_LLAMA})
    (folder / "model.pb.bin").write_bytes(b"\x0a\x09model.bin")
    (folder / "model.bin").write_bytes(b"\x00" * 64)
    (folder / "cache").mkdir()
    with zipfile.ZipFile(folder / "cache" / "txn_bins.zip", "w") as z:
        z.writestr(
            zipfile.ZipInfo("txn_0.bin", date_time=(2025, 1, 1, 0, 0, 0)), b"\x00" * 16
        )  # the same bytes each build
    (folder / "LICENSE.txt").write_text("MIT License (placeholder in this replica).\n", encoding="utf-8")
    _common_llama_files(folder, name)
    return folder


def qwen25_rai_1_6() -> Path:
    """The 1.6 layout: config_entries + custom_ops_library; its real genai_config, unchanged."""
    src = ROOT / "tests" / "fixtures" / "reference" / "genai_config_Qwen-2.5-1.5B-Instruct-onnx-ryzenai-npu_RAI1.6.json"
    folder = REPLICAS / "Qwen-2.5-1.5B-Instruct-onnx-ryzenai-npu"
    folder.mkdir(parents=True)
    shutil.copy2(src, folder / "genai_config.json")
    shutil.copy2(
        ROOT / "tests" / "fixtures" / "reference" / "rai_config_Qwen-2.5-1.5B-Instruct-onnx-ryzenai-npu.json",
        folder / "rai_config.json",
    )
    shutil.copy2(MODELS / "tiny-qwen3" / "model.onnx", folder / "fusion.onnx")
    shutil.copy2(MODELS / "tiny-qwen3" / "model.onnx.data", folder / "model.onnx.data")  # the data fusion.onnx names
    (folder / "prefill.pb.bin").write_bytes(b"\x00" * 16)
    for n in ("tokenizer.json", "special_tokens_map.json"):
        shutil.copy2(MODELS / "tiny-qwen3" / n, folder / n)
    # No chat template shipped: the plugin falls back to its ChatML template for qwen2.
    tcfg = json.loads((MODELS / "tiny-qwen3" / "tokenizer_config.json").read_text(encoding="utf-8"))
    tcfg.pop("chat_template", None)
    _write_json(folder / "tokenizer_config.json", tcfg)
    return folder


def smollm2_rai_1_7_hybrid() -> Path:
    """The 1.7 hybrid layout (options under provider_options[0].RyzenAI), runnable on the CPU."""
    tiny = MODELS / "tiny-llama"
    src = ROOT / "tests" / "fixtures" / "reference" / "genai_config_SmolLM2-135M-Instruct-onnx-ryzenai-1.7-hybrid.json"
    folder = REPLICAS / "SmolLM2-135M-Instruct-onnx-ryzenai-1.7-hybrid"
    folder.mkdir(parents=True)
    real = json.loads(src.read_text(encoding="utf-8"))
    small = json.loads((tiny / "genai_config.json").read_text(encoding="utf-8"))
    for key in SHAPE_KEYS + ("inputs", "outputs"):
        real["model"]["decoder"][key] = small["model"]["decoder"][key]
    for key in ("bos_token_id", "eos_token_id", "pad_token_id", "vocab_size"):
        real["model"][key] = small["model"][key]
    _write_json(folder / "genai_config.json", real)
    _copy_weights(tiny, folder, onnx_name="model_jit.onnx")
    (folder / "model_jit.pb.bin").write_bytes(b"\x00" * 16)
    _copy_tokenizer(tiny, folder, template_file=True)
    return folder


def vitisai_rai_1_4() -> Path:
    """The 1.4 NPU-only layout: a VitisAI provider with a config_file."""
    folder = REPLICAS / "Phi-3-mini-4k-instruct-onnx-ryzenai-npu-1.4"
    folder.mkdir(parents=True)
    tiny = MODELS / "tiny-llama"
    cfg = _genai_config(
        tiny,
        model_type="phi3",
        context_length=4096,
        filename="model_quantized.onnx",
        session_options={"provider_options": [{"VitisAI": {"config_file": "vaip_config.json"}}]},
        search={"max_length": 4096},
    )
    _write_json(folder / "genai_config.json", cfg)
    _write_json(folder / "vaip_config.json", {"passes": [{"name": "init", "plugin": "vaip-pass_init"}]})
    _write_json(folder / "rai_config.json", {"max_prompt_length": {"1.3.1": 2048, "1.4.0": 2048}})
    shutil.copy2(tiny / "model.onnx", folder / "model_quantized.onnx")
    shutil.copy2(tiny / "model.onnx.data", folder / "model.onnx.data")
    _copy_tokenizer(tiny, folder, template_file=True)
    return folder


def lfs_pointer_variant() -> Path:
    """A clone without `git lfs pull`: weights, tokenizer and bucket files are LFS pointers."""
    folder = llama_npu_4k("Llama-3.2-1B_rai_1.8.0_npu_4K-lfs-pointers")
    for p in [folder / "model.onnx.data", folder / "tokenizer.json", *folder.glob("dd_metastate_*.fconst")]:
        p.write_text(_lfs_pointer(p.read_bytes() or p.name.encode()), encoding="utf-8")
    return folder


def main() -> None:
    if REPLICAS.exists():
        shutil.rmtree(REPLICAS)
    REPLICAS.mkdir(parents=True)
    for make in (
        llama_npu_4k,
        qwen3_npu_4k,
        gemma3_npu_16k,
        llama_hybrid,
        qwen25_rai_1_6,
        smollm2_rai_1_7_hybrid,
        vitisai_rai_1_4,
        lfs_pointer_variant,
    ):
        folder = make()
        print(f"[replicas] {folder.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
