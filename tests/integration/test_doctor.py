"""``ryzenai-llm doctor``: on this machine (CPU build, no NPU) it runs what it can and says what it cannot."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from conftest import FIXTURES, REPLICAS
from ryzenai_cli import doctor_machine
from ryzenai_cli.doctor_machine import npu_devices_linux, npu_devices_windows
from ryzenai_cli.main import main
from ryzenai_core.package import folder as package_module
from ryzenai_core.package.runtime import ENV_EP_PATH, RuntimeInfo

SYSTEM = ["platform", "onnxruntime-genai", "onnxruntime", "Ryzen AI release", "Ryzen AI EP library", "NPU device"]


def doctor_json(capsys, *argv: str) -> tuple[int, dict]:
    code = main(["doctor", *argv, "--json"])
    out = json.loads(capsys.readouterr().out)
    assert all(set(c) == {"name", "status", "detail"} for c in out["checks"])
    assert all(c["status"] in ("ok", "warn", "fail", "skip") for c in out["checks"])
    assert code == (1 if any(c["status"] == "fail" for c in out["checks"]) else 0)
    return code, out


def checks(out: dict) -> dict[str, tuple[str, str]]:
    return {c["name"]: (c["status"], c["detail"]) for c in out["checks"]}


def test_no_model_reports_the_machine_and_what_it_cannot_check(capsys, monkeypatch):
    monkeypatch.delenv(ENV_EP_PATH, raising=False)
    code, out = doctor_json(capsys)
    assert code == 0 and [c["name"] for c in out["checks"]] == SYSTEM
    found = checks(out)
    assert found["onnxruntime-genai"][0] == "warn" and "not a Ryzen AI build" in found["onnxruntime-genai"][1]
    assert found["Ryzen AI release"] == ("skip", "no Ryzen AI build of onnxruntime-genai installed")
    assert found["Ryzen AI EP library"][0] == "skip" and f"{ENV_EP_PATH} is unset" in found["Ryzen AI EP library"][1]
    assert found["NPU device"][0] == "skip" and "no AMD NPU among the PCI devices" in found["NPU device"][1]
    assert out["system"]["onnxruntime_genai"]["ryzenai_build"] is False
    assert out["system"]["ep_library"]["file"] == "libonnxruntime_providers_ryzenai.so"


def test_the_human_report_is_a_table(capsys):
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    assert "ryzenai-llm doctor" in out and "NPU device" in out and "skip" in out


def test_a_ryzenai_build_without_ep_or_npu_fails(capsys, monkeypatch):
    monkeypatch.setattr(doctor_machine, "runtime_info", lambda: RuntimeInfo("onnxruntime-genai-ryzenai", "0.14.0", True, "1.8"))
    code, out = doctor_json(capsys)
    found = checks(out)
    assert code == 1
    assert found["Ryzen AI release"] == ("ok", "1.8, the release of onnxruntime-genai-ryzenai 0.14.0")
    assert found["Ryzen AI EP library"][0] == "fail" and found["NPU device"][0] == "fail"


def test_a_runtime_older_than_the_ep_search_is_not_asked_for_the_library(capsys, monkeypatch):
    monkeypatch.setattr(doctor_machine, "runtime_info", lambda: RuntimeInfo("onnxruntime-genai-ryzenai", "0.11.2", True, "1.7"))
    _, out = doctor_json(capsys)
    status, detail = checks(out)["Ryzen AI EP library"]
    assert status == "skip" and "older than onnxruntime-genai 0.12" in detail


def test_the_embedded_model_loads_generates_and_reuses_exactly(capsys):
    code, out = doctor_json(capsys, "tiny-qa-llama")
    found = checks(out)
    assert code == 0
    assert [n for n in found if n not in SYSTEM] == [
        "package", "package files", "package path", "chat format", "load", "generation", "KV reuse", "long prompt",
    ]
    assert found["package"][0] == "ok" and found["package"][1].startswith("tiny-qa-llama (")
    assert found["generation"][0] == "ok" and found["generation"][1].startswith("ran on CPU: ")
    assert "time to first token" in found["generation"][1]
    assert found["KV reuse"][0] == "ok" and "its greedy answer equals a cold run's" in found["KV reuse"][1]
    assert found["long prompt"][0] == "skip"
    m = out["measurements"]
    assert m["provider"] == "CPU" and m["load_seconds"] > 0 and m["ttft_seconds"] > 0 and m["reused_prompt_tokens"] > 0


def test_an_npu_replica_is_checked_on_the_cpu_and_says_the_npu_was_not(capsys):
    code, out = doctor_json(capsys, str(REPLICAS / "Llama-3.2-1B_rai_1.8.0_npu_4K"))
    found = checks(out)
    assert code == 0
    assert found["package"][1].startswith("Llama-3.2-1B_rai_1.8.0_npu_4K (") and "full-fusion" in found["package"][1]
    assert found["package files"][0] == "ok"
    assert found["release match"][0] == "skip"
    assert found["NPU load"][0] == "skip" and "needs AMD's Ryzen AI build" in found["NPU load"][1]
    assert found["load"][0] == "ok" and "provider='cpu'" in found["load"][1]
    assert found["generation"][0] == "warn" and found["generation"][1].startswith("ran on CPU (not the NPU): 16 tokens")
    assert found["KV reuse"][0] == "skip" and "--kv-reuse" in found["KV reuse"][1]


def test_kv_reuse_can_be_turned_on_to_compare(capsys):
    _, out = doctor_json(capsys, str(REPLICAS / "Qwen3-4B_rai_1.8.0_npu_4K"), "--kv-reuse", "--max-new-tokens", "8")
    assert checks(out)["KV reuse"][0] == "ok"


def test_a_16k_package_gets_a_prompt_over_its_run_length(capsys):
    _, out = doctor_json(capsys, str(REPLICAS / "Gemma-3-4b_rai_1.8.0_npu_16K"), "--max-new-tokens", "4")
    status, detail = checks(out)["long prompt"]
    assert status == "ok" and detail.startswith("4608 tokens (over the 4096-token run length)")
    assert out["measurements"]["long_prompt"]["prompt_tokens"] == 4608


@pytest.mark.parametrize(("name", "shapes"), [("tiny-bert-st", ["dynamic"]), ("tiny-bert-static", ["128"])])
def test_an_embedding_folder_times_the_first_vector_of_each_shape(capsys, name, shapes):
    _, out = doctor_json(capsys, str(FIXTURES / "embeddings" / name))
    found = checks(out)
    assert found["embedding model"][0] == "ok" and found["embedding model"][1].startswith(f"{name} (")
    assert found["first vector"][0] == "warn" and "not the NPU" in found["first vector"][1]
    assert list(out["measurements"]["first_vector_seconds"]) == shapes


def test_lfs_pointers_fail_and_nothing_is_loaded(capsys):
    code, out = doctor_json(capsys, str(REPLICAS / "Llama-3.2-1B_rai_1.8.0_npu_4K-lfs-pointers"))
    found = checks(out)
    assert code == 1 and found["package files"][0] == "fail" and "git lfs pull" in found["package files"][1]
    assert "load" not in found and "generation" not in found


def test_a_missing_cache_fails_and_a_path_hazard_warns(capsys, monkeypatch, copy_package):
    import shutil

    folder = copy_package(REPLICAS / "Llama-3.2-1B_rai_1.8.0_npu_4K", "Modèles-Llama-3.2-1B_rai_1.8.0_npu_4K")
    shutil.rmtree(folder / "cache")
    monkeypatch.setattr(package_module, "NARROW_PATHS", True)  # judged as on Windows
    code, out = doctor_json(capsys, str(folder))
    found = checks(out)
    assert code == 1 and found["package files"] == ("fail", "missing cache/: download the package again")
    assert found["package path"][0] == "warn" and "non-ASCII characters (è)" in found["package path"][1]
    assert "set HF_HOME=C:\\hf" in found["package path"][1]


def test_a_missing_model_is_a_failed_check(capsys, tmp_path):
    code, out = doctor_json(capsys, str(tmp_path / "nowhere"))
    assert code == 1 and checks(out)["package"][0] == "fail"


# ---------------------------------------------------------------------- seeing the NPU
def _pci(root: Path, slot: str, vendor: int, device: int, revision: int, driver: str | None = None) -> None:
    dev = root / "devices" / slot
    dev.mkdir(parents=True)
    for name, value in (("vendor", vendor), ("device", device), ("revision", revision)):
        (dev / name).write_text(f"0x{value:04x}\n")
    if driver:
        (root / "drivers" / driver).mkdir(parents=True, exist_ok=True)
        os.symlink(f"../../drivers/{driver}", dev / "driver")


def test_linux_npus_are_read_from_the_pci_devices(tmp_path):
    _pci(tmp_path, "0000:00:08.0", 0x1022, 0x14EA, 0x00)  # an AMD bridge
    _pci(tmp_path, "0000:c5:00.1", 0x1022, 0x17F0, 0x10, "amdxdna")
    _pci(tmp_path, "0000:c6:00.1", 0x1022, 0x17F0, 0x20)
    _pci(tmp_path, "0000:c7:00.1", 0x1022, 0x1502, 0x00, "amdxdna")
    _pci(tmp_path, "0000:01:00.0", 0x10DE, 0x17F0, 0x00)  # another vendor's id
    found = npu_devices_linux(tmp_path / "devices")
    assert [(d["name"], d["driver"], d["runs_llm_packages"]) for d in found] == [
        ("Strix Point (STX)", "amdxdna", True),
        ("Krackan Point (KRK)", None, True),
        ("Phoenix / Hawk Point (PHX/HPT)", "amdxdna", False),
    ]
    assert found[0]["device"] == "0000:c5:00.1 [1022:17f0] rev 10"
    assert npu_devices_linux(tmp_path / "absent") == []


def test_windows_npus_are_read_from_pnputil():
    listing = (
        "Microsoft PnP Utility\r\n\r\n"
        "Instance ID:                PCI\\VEN_1022&DEV_17F0&SUBSYS_0F541025&REV_10\\4&2c1e1d7c&0&0041\r\n"
        "Device Description:         NPU Compute Accelerator Device\r\n"
        "Hardware IDs:               PCI\\VEN_1022&DEV_17F0&SUBSYS_0F541025&REV_10\r\n"
        "                            PCI\\VEN_1022&DEV_17F0&REV_10\r\n"
        "Instance ID:                PCI\\VEN_1002&DEV_150E&SUBSYS_0F541025&REV_C1\\4&2c1e1d7c&0&0141\r\n"
    )
    found = npu_devices_windows(listing, "NPU driver 32.0.203.280")
    assert {d["name"] for d in found} == {"Strix Point (STX)"}
    assert all(d["driver"] == "NPU driver 32.0.203.280" for d in found)
    assert npu_devices_windows("PCI\\VEN_1022&DEV_17F0&REV_20")[0]["name"] == "Krackan Point (KRK)"
    assert npu_devices_windows("no NPU here") == []
