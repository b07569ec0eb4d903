from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPLICAS
from ryzenai_cli.main import main

KEYS = {"model_type", "mode", "release", "provider", "token_backend", "lfs_pointers", "budget"}
BUDGET_KEYS = {"prompt_limit", "window", "prefill_window", "prefill_buckets", "decode_buckets"}
PLAN_KEYS = {"prompt_tokens", "prefill_bucket", "padding", "prefill_windows", "max_new_tokens", "decode_buckets"}


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_info_json_schema(capsys):
    code, out, _ = run(capsys, "info", str(REPLICAS / "Qwen3-4B_rai_1.8.0_npu_4K"), "--json")
    assert code == 0
    data = json.loads(out)
    assert KEYS <= data.keys() and BUDGET_KEYS <= data["budget"].keys()
    assert "plan" not in data
    assert data["mode"] == "full-fusion" and data["release"] == "1.8.0" and data["token_backend"] == "npu"
    assert data["budget"]["prompt_limit"] == 4095  # max_prompt_length 4096 less the answer's token: one number


def test_info_json_plan(capsys):
    code, out, _ = run(
        capsys,
        "info",
        str(REPLICAS / "Qwen3-4B_rai_1.8.0_npu_4K"),
        "--json",
        "--prompt-tokens",
        "1030",
        "--max-new-tokens",
        "100",
    )
    plan = json.loads(out)["plan"]
    assert PLAN_KEYS <= plan.keys()
    assert (plan["prefill_bucket"], plan["padding"], plan["max_new_tokens"], plan["decode_buckets"]) == (
        1536,
        506,
        100,
        [2048],
    )


def test_info_over_the_limit_exits_non_zero(capsys):
    code, out, err = run(
        capsys, "info", str(REPLICAS / "Llama-3.2-1B_rai_1.8.0_npu_4K"), "--json", "--prompt-tokens", "5000"
    )
    assert code != 0 and out == ""
    assert "5000" in err and "4096" in err


def test_info_env_release(capsys, monkeypatch):
    monkeypatch.setenv("RYZENAI_VERSION", "1.5.1")
    _, out, _ = run(capsys, "info", str(REPLICAS / "Qwen3-4B_rai_1.8.0_npu_4K"), "--json")
    data = json.loads(out)
    assert data["release"] == "1.5.1" and data["budget"]["prompt_limit"] == 2048


def test_info_lfs_pointers(capsys):
    _, out, _ = run(capsys, "info", str(REPLICAS / "Llama-3.2-1B_rai_1.8.0_npu_4K-lfs-pointers"), "--json")
    assert "model.onnx.data" in json.loads(out)["lfs_pointers"]


def test_info_text_default_model(capsys):
    code, out, _ = run(capsys, "info")
    assert code == 0 and "tiny-qa-llama" in out and "window" in out


def test_info_text_plan_for_token_fusion(capsys):
    _, out, _ = run(capsys, "info", str(REPLICAS / "Gemma-3-4b_rai_1.8.0_npu_16K"), "--prompt-tokens", "3000")
    assert "token-fusion" in out and "prefill runs" not in out  # its window (search.max_length) is one run
    assert "prefill bucket  3072, 72 padding tokens (an estimate: the package has no prefill bucket files)" in out
    assert "decode buckets  3072, 4096" in out
    vision = next(line for line in out.splitlines() if line.startswith("vision"))
    assert "gemma-3-vision.onnx" in vision and "gemma-3-embedding.onnx" in vision
    assert "256 prompt tokens per image" in vision and "2 NPU vision state file(s)" in vision


def test_info_json_vision_parts(capsys):
    _, out, _ = run(capsys, "info", str(REPLICAS / "Gemma-3-4b_rai_1.8.0_npu_16K"), "--json")
    data = json.loads(out)
    assert data["image_tokens"] == 256 and data["vision_parts"]["processor"] == "processor_config.json"


def test_missing_folder_is_an_error_not_a_traceback(capsys, tmp_path):
    code, _, err = run(capsys, "info", str(tmp_path / "missing"))
    assert code == 2 and err.startswith("error:") and "does not exist" in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--prompt-tokens", "0"], "argument --prompt-tokens: 0 is not a positive number of tokens"),
        (["--prompt-tokens", "abc"], "argument --prompt-tokens: 'abc' is not a whole number of tokens"),
        (["--max-new-tokens", "-3"], "argument --max-new-tokens: -3 is not a positive number of tokens"),
    ],
)
def test_bad_prompt_tokens_is_rejected(capsys, argv, message):
    with pytest.raises(SystemExit) as info:
        main(["info", *argv])
    assert info.value.code == 2  # argparse's usage error, not a traceback or a success
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("usage: ryzenai-llm info") and f"error: {message}\n" in err


def test_console_script_runs():
    exe = Path(sys.executable).with_name("ryzenai-llm")
    command = [str(exe)] if exe.exists() else [shutil.which("ryzenai-llm") or "ryzenai-llm"]
    out = subprocess.run([*command, "info", "--json"], capture_output=True, text=True, check=True).stdout
    assert json.loads(out)["mode"] == "plain"


def info_rows(out):
    """The ``info`` text as {label: value} (labels are padded to one column)."""
    return {line[:16].strip(): line[16:].strip() for line in out.splitlines() if line and not line.startswith(" ")}


def test_info_text_plan_for_a_plain_package(capsys):
    code, out, _ = run(capsys, "info", "tiny-random-llama", "--prompt-tokens", "100", "--max-new-tokens", "50")
    assert code == 0
    assert info_rows(out)["prefill buckets"] == "none (plain shapes)"
    plan = out[out.index("a prompt of 100 tokens:") :].splitlines()
    assert plan == [
        "a prompt of 100 tokens:",
        "  prefill         no buckets, no padding",
        "  output          up to 50 new tokens",
    ]  # and no decode buckets line


def test_info_text_vision_package_without_npu_state_files(capsys):
    from conftest import MODELS

    _, out, _ = run(capsys, "info", str(MODELS / "tiny-gemma3-vision"))
    assert info_rows(out)["vision"] == (
        "yes: vision gemma-3-vision.onnx, embedding gemma-3-embedding.onnx, "
        "processor processor_config.json; 256 prompt tokens per image"
    )


def test_info_text_says_how_to_fetch_lfs_pointers(capsys):
    folder = REPLICAS / "Llama-3.2-1B_rai_1.8.0_npu_4K-lfs-pointers"
    code, out, _ = run(capsys, "info", str(folder))
    assert code == 0
    assert info_rows(out)["LFS pointers"] == f"4 file(s): run `git lfs pull` in {folder}"
