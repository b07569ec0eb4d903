from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from conftest import REPLICAS, TINY_LLAMA, TINY_QWEN3
from ryzenai_core import (
    ConfigError,
    LfsPointerError,
    MissingTokenizerError,
    Mode,
    ModelNotFoundError,
    ModelPackage,
    ModelPackageError,
    RyzenAIError,
    UnsafePathError,
)
from ryzenai_core.package import folder as package_module
from ryzenai_core.package.scan import MAX_NARROW_PATH, path_hazards, prompt_limit_key

PREFILL_4K = [128, 256, 512, 768, 1024, 1536, 2048, 2304, 3072, 4096]
TOKEN_4K = [256, 512, 1024, 2048, 3072, 4096]
AMD_PREFILL = [128, 256, 512, 768, 1024, 1536, 1792, 2048, 2304, 3072, 4096]

# name -> (type, mode, release, provider, token_backend, prompt_limit, window, prefill_window, prefill, decode)
EXPECTED = {
    "Llama-3.2-1B_rai_1.8.0_npu_4K": (
        "llama",
        Mode.FULL_FUSION,
        "1.8.0",
        "RyzenAI",
        "npu",
        4095,
        4096,
        None,
        PREFILL_4K,
        TOKEN_4K,
    ),
    "Qwen3-4B_rai_1.8.0_npu_4K": (
        "qwen3",
        Mode.FULL_FUSION,
        "1.8.0",
        "RyzenAI",
        "npu",
        4095,
        4096,
        None,
        PREFILL_4K,
        TOKEN_4K,
    ),
    "Gemma-3-4b_rai_1.8.0_npu_16K": (
        "gemma3",
        Mode.TOKEN_FUSION,
        "1.8.0",
        "RyzenAI",
        "npu",
        4095,
        4096,
        4096,
        AMD_PREFILL,
        TOKEN_4K,
    ),
    "Llama-3.2-1B_rai_1.8.0_hybrid": ("llama", Mode.HYBRID, "1.8.0", "RyzenAI", None, 4095, 4096, 4096, [], []),
    "SmolLM2-135M-Instruct-onnx-ryzenai-1.7-hybrid": (
        "llama",
        Mode.HYBRID,
        "1.7",
        "RyzenAI",
        None,
        4096,  # one prefill run: no hybrid_opt_chunk_context in its options
        8192,
        4096,
        [],
        [],
    ),
    "Qwen-2.5-1.5B-Instruct-onnx-ryzenai-npu": (
        "qwen2",
        Mode.NPU,
        None,
        "RyzenAI",
        "npu",
        2048,
        4096,
        4096,
        AMD_PREFILL,
        [256, 512, 1024, 2048, 4096],
    ),
    "Phi-3-mini-4k-instruct-onnx-ryzenai-npu-1.4": (
        "phi3",
        Mode.NPU,
        None,
        "VitisAI",
        None,
        2048,
        4096,
        None,
        AMD_PREFILL,
        [256, 512, 1024, 2048, 4096],
    ),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_replica_facts(name):
    mtype, mode, release, provider, backend, limit, window, pwin, prefill, decode = EXPECTED[name]
    pkg = ModelPackage.open(REPLICAS / name)
    assert pkg.model_type == mtype
    assert pkg.mode is mode
    assert pkg.release == release
    assert pkg.provider == provider
    assert pkg.token_backend == backend
    b = pkg.budget
    assert (b.prompt_limit, b.window, b.prefill_window) == (limit, window, pwin)
    assert list(b.prefill_buckets) == prefill
    assert list(b.decode_buckets) == decode
    assert pkg.is_ryzenai


def test_plain_builder_output():
    pkg = ModelPackage.open(TINY_LLAMA)
    assert pkg.mode is Mode.PLAIN and not pkg.is_ryzenai
    assert pkg.provider == "cpu" and pkg.release is None
    assert pkg.budget.prefill_buckets == () and pkg.budget.decode_buckets == ()
    assert pkg.budget.window == 4096
    assert pkg.chat_template_source.startswith("{{- bos_token }}")
    assert pkg.eos_token_ids  # list of ids from genai_config


def test_gemma_vision_parts_and_bucket_node():
    pkg = ModelPackage.open(REPLICAS / "Gemma-3-4b_rai_1.8.0_npu_16K")
    names = {p.name for p in pkg.vision_files}
    assert {
        "gemma-3-embedding.onnx",
        "gemma-3-vision.onnx",
        "processor_config.json",
        "dd_metastate_Llm_Vision_Attention_0.state",
    } <= names
    assert pkg.has_vision
    assert pkg.bucket_node == "modellayers.0input_layernormMLADFRMSNORM"
    assert pkg.provider_options["fusion_opt_io_bind_kv_cache"] == "1"
    assert pkg.external_files[0].name == "model.pb.bin"
    assert pkg.vision_parts == {
        "vision": "gemma-3-vision.onnx",
        "embedding": "gemma-3-embedding.onnx",
        "processor": "processor_config.json",
        "npu_states": [
            "partitioned/dd_metastate_Llm_Vision_Attention_0.state",
            "partitioned/dd_metastate_Llm_Vision_node_type_as_1_Q4.state",
        ],
    }
    assert pkg.image_tokens == 256
    described = pkg.describe()
    assert described["image_tokens"] == 256 and described["vision_parts"] == pkg.vision_parts
    assert json.loads(json.dumps(described)) == described


class MarkerVocabulary:
    """A tokenizer stand-in: the ids each image marker encodes to (several: the vocabulary lacks it)."""

    def __init__(self, ids: dict[str, list[int]]) -> None:
        self.ids = ids

    def encode(self, text: str) -> list[int]:
        return self.ids[text]


def test_the_image_markers_generation_never_picks(copy_package):
    from ryzenai_core.generation.loader import image_marker_ids

    vision = REPLICAS / "Gemma-3-4b_rai_1.8.0_npu_16K"
    gemma = MarkerVocabulary({"<start_of_image>": [6], "<image_soft_token>": [8], "<end_of_image>": [7]})
    assert image_marker_ids(ModelPackage.open(vision), gemma) == {6, 7, 8}
    # a vocabulary without them: the pieces they split into ("<", "image", ...) stay open; the
    # config's image_token_id is masked however it encodes
    folder = copy_package(vision)
    config = json.loads((folder / "genai_config.json").read_text(encoding="utf-8"))
    config["model"]["image_token_id"] = 99
    (folder / "genai_config.json").write_text(json.dumps(config), encoding="utf-8")
    split = MarkerVocabulary({m: [60, 61, 62] for m in ("<start_of_image>", "<image_soft_token>", "<end_of_image>")})
    assert image_marker_ids(ModelPackage.open(folder), split) == {99}
    assert image_marker_ids(ModelPackage.open(REPLICAS / "Llama-3.2-1B_rai_1.8.0_npu_4K"), gemma) == frozenset()


def test_text_only_package_has_no_vision_parts():
    pkg = ModelPackage.open(REPLICAS / "Llama-3.2-1B_rai_1.8.0_npu_4K")
    assert not pkg.has_vision and pkg.vision_parts is None and pkg.image_tokens is None
    assert pkg.describe()["image_tokens"] is None


def test_custom_ops_layout_reads_config_entries():
    pkg = ModelPackage.open(REPLICAS / "Qwen-2.5-1.5B-Instruct-onnx-ryzenai-npu")
    assert pkg.layout == "custom-ops"
    assert pkg.provider_options["max_length_for_kv_cache"] == "4096"
    assert pkg.budget.window == 4096  # min(32768, 32768, 4096)
    assert pkg.chat_template_source is None


def test_release_for_1_6_package_chooses_its_key(monkeypatch):
    monkeypatch.setenv("RYZENAI_VERSION", "1.6.0")
    pkg = ModelPackage.open(REPLICAS / "Qwen-2.5-1.5B-Instruct-onnx-ryzenai-npu")
    assert pkg.release == "1.6.0" and pkg.release_source.startswith("environment")
    assert pkg.budget.prompt_limit == 4095  # max_prompt_length 4096 in a 4096 window: one token left to answer


def test_env_var_overrides_folder_name(monkeypatch):
    monkeypatch.setenv("RYZENAI_VERSION", "1.5.1")
    pkg = ModelPackage.open(REPLICAS / "Llama-3.2-1B_rai_1.8.0_npu_4K")
    assert pkg.release == "1.5.1"
    assert pkg.budget.prompt_limit == 2048


def test_bad_env_var_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("RYZENAI_VERSION", "one.eight")
    with pytest.raises(RyzenAIError, match=r"'one.eight'.*RYZENAI_VERSION"):
        ModelPackage.open(REPLICAS / "Llama-3.2-1B_rai_1.8.0_npu_4K")


def test_explicit_release_argument():
    pkg = ModelPackage.open(REPLICAS / "Llama-3.2-1B_rai_1.8.0_npu_4K", release="1.4.1")
    assert pkg.budget.prompt_limit == 2048


@pytest.mark.parametrize(
    ("release", "key"),
    [
        ("1.8.0", "1.7.1"),
        ("1.7.1", "1.7.1"),
        ("1.7.0", "1.6.0"),
        ("1.7", "1.7.1"),
        ("1.6.0", "1.6.0"),
        ("1.5.0", "1.5.0"),
        ("1.5.1", "1.5.1"),
        ("2.0.0", "1.7.1"),
        ("1.2.0", "1.3.1"),
        (None, "1.3.1"),
    ],
)
def test_limit_key_is_newest_not_newer(release, key):
    limits = {"1.3.1": 2048, "1.4.0": 2048, "1.5.0": 2048, "1.5.1": 2048, "1.6.0": 4096, "1.7.1": 4096}
    assert prompt_limit_key(limits, release) == key


def test_lfs_pointers_are_listed_and_block_loading():
    pkg = ModelPackage.open(REPLICAS / "Llama-3.2-1B_rai_1.8.0_npu_4K-lfs-pointers")
    assert "model.onnx.data" in pkg.lfs_pointers and "tokenizer.json" in pkg.lfs_pointers
    with pytest.raises(LfsPointerError, match=r"model.onnx.data \(\d+ bytes\).*Git LFS pointers.*git lfs pull"):
        pkg.check_loadable()


def test_complete_package_is_loadable():
    ModelPackage.open(REPLICAS / "Llama-3.2-1B_rai_1.8.0_npu_4K").check_loadable()


# ----------------------------------------------------------------------------- bad folders
def _edit_config(folder: Path, fn) -> None:
    path = folder / "genai_config.json"
    cfg = json.loads(path.read_text())
    fn(cfg)
    path.write_text(json.dumps(cfg))


def test_missing_folder(tmp_path):
    with pytest.raises(ModelNotFoundError, match="does not exist"):
        ModelPackage.open(tmp_path / "nope")


def test_file_instead_of_folder(tmp_path):
    f = tmp_path / "model.onnx"
    f.write_text("x")
    with pytest.raises(ModelNotFoundError, match="is a file"):
        ModelPackage.open(f)


def test_missing_genai_config_points_to_subfolder(tmp_path, copy_package):
    copy_package(TINY_LLAMA, "inner")
    with pytest.raises(ConfigError, match="subfolder.*inner"):
        ModelPackage.open(tmp_path)


def test_corrupt_genai_config(copy_package):
    folder = copy_package(TINY_LLAMA)
    (folder / "genai_config.json").write_text('{"model": {"type": "llama",')
    with pytest.raises(ConfigError, match=r"not valid JSON \(line 1"):
        ModelPackage.open(folder)


def test_genai_config_that_is_an_lfs_pointer(copy_package):
    folder = copy_package(TINY_LLAMA)
    (folder / "genai_config.json").write_text("version https://git-lfs.github.com/spec/v1\noid sha256:ab\nsize 9\n")
    with pytest.raises(LfsPointerError, match="genai_config.json is a Git LFS pointer"):
        ModelPackage.open(folder)


@pytest.mark.parametrize("model_type", ["decoder", "gemma4_text", "lfm2", "qwen3_5_text", "llamaz"])
def test_any_model_type_opens(copy_package, model_type):
    """The installed runtime decides which types it runs (tests/integration/test_model_types.py loads them)."""
    folder = copy_package(TINY_LLAMA)
    _edit_config(folder, lambda c: c["model"].__setitem__("type", model_type))
    assert ModelPackage.open(folder).model_type == model_type


def test_missing_tokenizer(copy_package):
    folder = copy_package(TINY_LLAMA)
    (folder / "tokenizer.json").unlink()
    with pytest.raises(MissingTokenizerError, match="no tokenizer"):
        ModelPackage.open(folder)


@pytest.mark.parametrize("bad", ["../../x.onnx", "/etc/passwd", "C:\\Windows\\x.onnx", "sub/../../x.onnx"])
def test_decoder_path_escaping_the_folder(copy_package, bad):
    folder = copy_package(TINY_LLAMA)
    _edit_config(folder, lambda c: c["model"]["decoder"].__setitem__("filename", bad))
    with pytest.raises(UnsafePathError, match="outside the model folder"):
        ModelPackage.open(folder)


def test_external_data_path_escaping_the_folder(copy_package):
    folder = copy_package(REPLICAS / "Llama-3.2-1B_rai_1.8.0_hybrid")
    _edit_config(
        folder,
        lambda c: c["model"]["decoder"]["session_options"]["provider_options"][0]["RyzenAI"].__setitem__(
            "external_data_file", "../secrets.bin"
        ),
    )
    with pytest.raises(UnsafePathError, match="external_data_file"):
        ModelPackage.open(folder)


def test_symlink_escaping_the_folder(copy_package, tmp_path):
    folder = copy_package(TINY_LLAMA)
    outside = tmp_path / "outside.onnx"
    outside.write_bytes(b"x")
    (folder / "link.onnx").symlink_to(outside)
    _edit_config(folder, lambda c: c["model"]["decoder"].__setitem__("filename", "link.onnx"))
    with pytest.raises(UnsafePathError, match="resolves to"):
        ModelPackage.open(folder)


def test_missing_weight_file_blocks_loading(copy_package):
    folder = copy_package(TINY_LLAMA)
    (folder / "model.onnx").unlink()
    pkg = ModelPackage.open(folder)
    with pytest.raises(ModelPackageError, match=r"model.onnx is missing from .* \(genai_config.json names it\)"):
        pkg.check_loadable()


def test_bad_window_value(copy_package):
    folder = copy_package(TINY_LLAMA)
    _edit_config(folder, lambda c: c["search"].__setitem__("max_length", "lots"))
    with pytest.raises(ConfigError, match="search.max_length.*'lots'"):
        ModelPackage.open(folder).budget  # noqa: B018


def test_named_chat_template_list(copy_package):
    folder = copy_package(TINY_QWEN3)
    (folder / "chat_template.jinja").unlink()
    cfg = json.loads((folder / "tokenizer_config.json").read_text())
    cfg["chat_template"] = [{"name": "tool_use", "template": "TOOLS"}, {"name": "default", "template": "DEFAULT"}]
    (folder / "tokenizer_config.json").write_text(json.dumps(cfg))
    assert ModelPackage.open(folder).chat_template_source == "DEFAULT"


def test_unknown_release_uses_smallest_limit_and_says_so(copy_package):
    folder = copy_package(REPLICAS / "Llama-3.2-1B_rai_1.8.0_npu_4K", "renamed-llama")
    pkg = ModelPackage.open(folder)
    assert pkg.release is None
    assert pkg.budget.prompt_limit == 2048
    assert "RYZENAI_VERSION" in pkg.budget.prompt_limit_source


# ---------------------------------------------------------------------- partial downloads
NODE = "modellayers.0input_layernormMLADFRMSNORM"


@pytest.mark.parametrize(
    ("replica", "remove", "missing"),
    [
        ("Llama-3.2-1B_rai_1.8.0_npu_4K", "cache", ("cache/",)),
        ("Qwen3-4B_rai_1.8.0_npu_4K", f"cache/Token_{NODE}_meta.json", (f"cache/Token_{NODE}_meta.json",)),
        (
            "Qwen3-4B_rai_1.8.0_npu_4K",
            f"dd_metastate_Llm_Token_Token_{NODE}.state",
            (f"dd_metastate_Llm_Token_Token_{NODE}.state",),
        ),
        (
            "Gemma-3-4b_rai_1.8.0_npu_16K",
            f"dd_metastate_Llm_Token_Token_{NODE}.state",
            (f"dd_metastate_Llm_Token_Token_{NODE}.state",),
        ),
    ],
    ids=["full-fusion-cache", "blueprint", "full-fusion-state", "token-fusion-state"],
)
def test_a_partial_download_names_the_missing_npu_file(copy_package, capsys, replica, remove, missing):
    from ryzenai_cli.main import main

    folder = copy_package(REPLICAS / replica)
    target = folder / remove
    shutil.rmtree(target) if target.is_dir() else target.unlink()
    pkg = ModelPackage.open(folder)
    assert pkg.missing_files == missing and pkg.describe()["missing_files"] == list(missing)
    assert main(["info", str(folder)]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("missing files")]
    assert rows == [f"missing files     {', '.join(missing)} (a partial download: download it again)"]


def test_a_dot_cache_folder_counts_and_its_blueprints_are_checked(copy_package):
    folder = copy_package(REPLICAS / "Llama-3.2-1B_rai_1.8.0_npu_4K")
    (folder / "cache").rename(folder / ".cache")
    assert ModelPackage.open(folder).missing_files == ()
    (folder / ".cache" / f"{NODE}_meta.json").unlink()
    pkg = ModelPackage.open(folder)
    assert pkg.missing_files == (f".cache/{NODE}_meta.json",)
    with pytest.raises(ModelPackageError, match=rf"\.cache/{NODE}_meta.json is missing"):
        pkg.check_npu_files()


@pytest.mark.parametrize("replica", sorted(p.name for p in REPLICAS.iterdir()))
def test_complete_replicas_miss_nothing(replica):
    assert ModelPackage.open(REPLICAS / replica).missing_files == ()


# ---------------------------------------------------------------------- path hazards (Windows)
HF_DEFAULT = (
    "C:\\Users\\{user}\\.cache\\huggingface\\hub\\models--amd--Gemma-3-4b_rai_1.8.0_npu_16K\\snapshots\\" + "0" * 40
)
GEMMA_STATE = f"dd_metastate_Llm_Token_Token_{NODE}_attention_mask_padded_4096_.ctrlpkt"


def test_windows_path_hazards_are_told_with_the_fix():
    plain = HF_DEFAULT.format(user="alexandra.k")  # 11 characters: fits
    assert len(plain) + 1 + len(GEMMA_STATE) <= MAX_NARROW_PATH
    assert path_hazards(plain, GEMMA_STATE, windows=True) == []
    (accented,) = path_hazards(HF_DEFAULT.format(user="Jürgen"), GEMMA_STATE, windows=True)
    assert "holds non-ASCII characters (ü)" in accented and "set HF_HOME=C:\\hf" in accented
    long_user = "alexandra.konstantinopoulou.x"  # 29 characters
    (deep,) = path_hazards(HF_DEFAULT.format(user=long_user), GEMMA_STATE, windows=True)
    assert f"longest file path is {len(HF_DEFAULT.format(user=long_user)) + 1 + len(GEMMA_STATE)} characters" in deep
    assert f"over the {MAX_NARROW_PATH}" in deep and "set HF_HOME=C:\\hf" in deep
    assert path_hazards(HF_DEFAULT.format(user="Jürgen"), GEMMA_STATE, windows=False) == []  # Linux: bytes, no limit


def test_info_warns_of_a_non_ascii_package_path_on_windows(copy_package, monkeypatch, capsys):
    from ryzenai_cli.main import main

    folder = copy_package(REPLICAS / "Llama-3.2-1B_rai_1.8.0_npu_4K", "Modèles-Llama-3.2-1B_rai_1.8.0_npu_4K")
    assert ModelPackage.open(folder).path_warnings == []  # not on this (Linux) machine
    monkeypatch.setattr(package_module, "NARROW_PATHS", True)
    pkg = ModelPackage.open(folder)
    assert len(pkg.path_warnings) == 1 and "non-ASCII characters (è)" in pkg.path_warnings[0]
    assert main(["info", str(folder), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["path_warnings"] == pkg.path_warnings
    assert main(["info", str(folder)]) == 0
    assert f"path warning      {pkg.path_warnings[0]}" in capsys.readouterr().out.splitlines()


def test_windows_settings_soften_the_path_warnings():
    """The UTF-8 code page takes any folder name; LongPathsEnabled takes long paths from Python's process."""
    folder = (
        "C:\\Users\\Zoë\\.cache\\huggingface\\hub\\models--amd--Gemma-3-4b_rai_1.8.0_npu_16K\\snapshots\\" + "a" * 40
    )
    longest = "dd_metastate_Llm_Token_Token_" + "x" * 200
    strict = path_hazards(folder, longest, windows=True, long_paths=False, utf8=False)
    assert len(strict) == 2 and "non-ASCII" in strict[0] and "LongPathsEnabled is off" in strict[1]
    soft = path_hazards(folder, longest, windows=True, long_paths=True, utf8=True)
    assert len(soft) == 1 and "LongPathsEnabled is on, so Windows takes it from this process" in soft[0]
    assert "If the load fails" in soft[0]
    assert path_hazards(folder, longest, windows=False) == []


# ---------------------------------------------------------------------- a package read before (a worker's)
def test_a_package_read_before_is_reused_while_its_folder_is_unchanged(copy_package):
    folder = copy_package(TINY_LLAMA)
    read = ModelPackage.open(folder)
    assert read.stamp and ModelPackage.reuse(read, str(read.path)) is read
    assert ModelPackage.reuse(None, str(read.path)) == read  # none given: the folder is read


@pytest.mark.parametrize(
    "change",
    [
        lambda f: (f / "chat_template.jinja").write_text("{{ messages[0]['content'] }}"),  # a fact file rewritten
        lambda f: (f / "extra.onnx.data").write_bytes(b"0"),  # a file added to the folder
        lambda f: (f / "special_tokens_map.json").unlink(),  # a file removed
        lambda f: (f / "cache").mkdir(),  # a folder added (an NPU package's cache/)
    ],
    ids=["template", "file added", "file removed", "folder added"],
)
def test_a_package_read_before_is_read_again_once_its_folder_changed(copy_package, change):
    folder = copy_package(TINY_LLAMA)
    os.utime(folder, ns=(0, 0))  # an old folder: a change shows in its time however coarse the file system's clock
    read = ModelPackage.open(folder)
    change(folder)
    again = ModelPackage.reuse(read, str(read.path))
    assert again is not read and again.stamp != read.stamp


def test_a_package_of_another_folder_is_not_reused(copy_package):
    read = ModelPackage.open(copy_package(TINY_LLAMA))
    other = copy_package(TINY_LLAMA, "other")
    again = ModelPackage.reuse(read, str(other.resolve()))
    assert again.path == other.resolve() and again is not read
