"""``ryzenai-llm doctor``: on this machine (CPU build, no NPU) it runs what it can and says what it cannot.

What only a laptop has is stood in for: the PCI device table, ``/dev/accel``, ``/proc``, the
power supplies, AMD's ``xrt-smi`` (a script on ``PATH`` that prints what the real one prints),
the EP library (stand-in libraries built at test time) and the installed distributions
(``.dist-info`` folders with their ``RECORD``).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import stat
from pathlib import Path
from types import SimpleNamespace

import pytest

from conftest import FIXTURES, REPLICAS
from ryzenai_cli import doctor_machine, doctor_run
from ryzenai_cli.doctor_npu import (
    accel_files,
    driver_minimum,
    hardware_contexts,
    linux_settings,
    npu_devices_linux,
    npu_devices_windows,
    on_ac_power,
    peak_memory,
    power_mode,
)
from ryzenai_cli.doctor_report import Report
from ryzenai_cli.main import main
from ryzenai_core.package import folder as package_module
from ryzenai_core.package.ep import ENV_EP_PATH
from ryzenai_core.package.folder import ModelPackage

SYSTEM = [
    "platform",
    "onnxruntime-genai",
    "onnxruntime",
    "installed distributions",
    "Ryzen AI EP library",
    "Ryzen AI release",
    "NPU device",
    "NPU runtime",
]
LLAMA_NPU = REPLICAS / "Llama-3.2-1B_rai_1.8.0_npu_4K"


def doctor_json(capsys, *argv: str) -> tuple[int, dict]:
    code = main(["doctor", *argv, "--json"])
    out = json.loads(capsys.readouterr().out)
    assert all(set(c) == {"name", "status", "detail"} for c in out["checks"])
    assert all(c["status"] in ("ok", "warn", "fail", "skip") for c in out["checks"])
    assert code == (1 if any(c["status"] == "fail" for c in out["checks"]) else 0)
    return code, out


def checks(out: dict) -> dict[str, tuple[str, str]]:
    return {c["name"]: (c["status"], c["detail"]) for c in out["checks"]}


# ---------------------------------------------------------------------- stand-ins for the laptop
def _pci(root: Path, slot: str, vendor: int, device: int, revision: int, driver: str | None = None) -> None:
    dev = root / "devices" / slot
    dev.mkdir(parents=True)
    for name, value in (("vendor", vendor), ("device", device), ("revision", revision)):
        (dev / name).write_text(f"0x{value:04x}\n")
    if driver:
        (root / "drivers" / driver).mkdir(parents=True, exist_ok=True)
        os.symlink(f"../../drivers/{driver}", dev / "driver")


@pytest.fixture
def strix(tmp_path, monkeypatch) -> Path:
    """A Strix Point NPU with its driver bound, as this machine's PCI table."""
    _pci(tmp_path / "pci", "0000:c5:00.1", 0x1022, 0x17F0, 0x10, "amdxdna")
    monkeypatch.setattr(doctor_machine, "PCI_DEVICES", tmp_path / "pci" / "devices")
    monkeypatch.setattr(doctor_machine, "ACCEL", tmp_path / "no-accel")
    return tmp_path


XRT_EXAMINE = """System Configuration
  OS Name              : Linux
XRT
  Version              : 2.19.0
  NPU Driver Version   : {driver}
  NPU Firmware Version : 1.0.7.97

Device(s) Present
|BDF             |Name       |
|----------------|-----------|
|[00c5:00:01.1]  |NPU Strix  |
"""
XRT_PLATFORM = """--------------------------
[00c5:00:01.1] : NPU Strix
--------------------------
Platform
  Name                   : NPU Strix
  Performance Mode       : {mode}

Power                  : 1.277 Watts
"""
XRT_PARTITIONS = """--------------------------
[00c5:00:01.1] : NPU Strix
--------------------------
AIE Partitions
  Partition Index: 0
    Columns: [0, 1, 2, 3]
    HW Contexts:
      |PID    |Ctx ID  |Status  |Instr BO  |Sub  |Compl  |Migr  |Err  |Prio    |GOPS  |EGOPS  |FPS  |Latency  |
      |-------|--------|--------|----------|-----|-------|------|-----|--------|------|-------|-----|---------|
{rows}"""


@pytest.fixture
def xrt_smi(tmp_path, monkeypatch):
    """``xrt(driver=..., mode=..., pids=[...])`` puts a stand-in ``xrt-smi`` first on ``PATH``."""

    def install(driver: str = "32.0.203.280", mode: str = "Performance", pids: tuple[int, ...] = ()) -> None:
        folder = tmp_path / "xrt-bin"
        folder.mkdir(exist_ok=True)
        rows = "".join(
            f"      |{pid:<7}|0       |Active  |64 KB     |57   |56     |0     |0    |Normal  |0     |0      |0    |0        |\n"
            for pid in pids
        )
        for name, text in (
            ("examine", XRT_EXAMINE.format(driver=driver)),
            ("platform", XRT_PLATFORM.format(mode=mode)),
            ("aie-partitions", XRT_PARTITIONS.format(rows=rows)),
        ):
            (folder / f"{name}.txt").write_text(text)
        script = folder / "xrt-smi"
        script.write_text(
            "#!/bin/sh\n"
            f'if [ "$3" = "platform" ]; then cat {folder}/platform.txt; '
            f'elif [ "$3" = "aie-partitions" ]; then cat {folder}/aie-partitions.txt; '
            f"else cat {folder}/examine.txt; fi\n"
        )
        script.chmod(script.stat().st_mode | stat.S_IXUSR)
        monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")

    return install


# ---------------------------------------------------------------------- the machine
def test_no_model_reports_the_machine_and_what_it_cannot_check(capsys):
    code, out = doctor_json(capsys)
    assert code == 0 and [c["name"] for c in out["checks"]] == SYSTEM
    found = checks(out)
    assert found["onnxruntime-genai"][0] == "ok" and "a public build" in found["onnxruntime-genai"][1]
    assert found["Ryzen AI EP library"][0] == "skip" and f"{ENV_EP_PATH} is unset" in found["Ryzen AI EP library"][1]
    assert "<venv>/deployment/lib" in found["Ryzen AI EP library"][1]
    assert found["Ryzen AI release"] == ("skip", "no runtime here can run Ryzen AI packages")
    assert found["NPU device"][0] == "skip" and found["NPU runtime"][0] == "skip"
    assert "run doctor with your application's interpreter" in found["platform"][1]
    assert out["system"]["interpreter"]["executable"] and "conda_prefix" in out["system"]["interpreter"]
    assert out["system"]["ep_library"]["file"] == "libonnxruntime_providers_ryzenai.so"


def test_the_human_report_is_a_table(capsys):
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    assert "ryzenai-llm doctor" in out and "NPU device" in out and "skip" in out


def test_an_npu_without_a_runtime_that_can_use_it_fails(capsys, strix):
    """A laptop whose Python has the public build and no EP library: its packages would run on the CPU only."""
    code, out = doctor_json(capsys)
    found = checks(out)
    assert code == 1
    assert found["NPU device"][0] == "ok" and "Strix Point (STX) (XDNA2)" in found["NPU device"][1]
    status, detail = found["NPU runtime"]
    assert status == "fail" and "this PC has an NPU, but no runtime here can use it" in detail
    assert "libonnxruntime_providers_ryzenai.so is not found" in detail and "provider='cpu'" in detail
    assert found["NPU device access"][0] == "fail" and "amdxdna" in found["NPU device access"][1]
    assert found["XRT_INI_PATH"][0] == "warn" and "num_heap_pages = 8" in found["XRT_INI_PATH"][1]
    assert found["memlock"][0] in ("ok", "warn")


def test_an_amd_build_whose_ep_library_loads_is_the_npu_runtime(capsys, strix, installed, monkeypatch, stand_in_eps):
    installed(("onnxruntime-genai-ryzenai", "0.14.0"))
    monkeypatch.setenv(ENV_EP_PATH, str(stand_in_eps["no_device"]))
    _, out = doctor_json(capsys)
    found = checks(out)
    assert found["Ryzen AI EP library"][0] == "ok" and "it loads in a child process" in found["Ryzen AI EP library"][1]
    assert found["Ryzen AI release"][0] == "ok" and found["Ryzen AI release"][1].startswith("1.8, the release of")
    assert found["NPU runtime"][0] == "ok"
    folder = str(stand_in_eps["no_device"].parent)
    assert found["LD_LIBRARY_PATH"][0] == "warn" and f"export LD_LIBRARY_PATH={folder}" in found["LD_LIBRARY_PATH"][1]


@pytest.mark.parametrize(
    ("kind", "says"),
    [
        ("other_release", "no CreateEpFactories entry point: it is an EP library of another Ryzen AI release"),
        ("missing_dependency", "does not load: libryzenai_standin_dep.so: cannot open shared object file"),
    ],
)
def test_an_ep_library_that_does_not_load_fails_before_any_model(capsys, strix, monkeypatch, stand_in_eps, kind, says):
    monkeypatch.setenv(ENV_EP_PATH, str(stand_in_eps[kind]))
    code, out = doctor_json(capsys)
    found = checks(out)
    assert code == 1 and found["Ryzen AI EP library"][0] == "fail" and says in found["Ryzen AI EP library"][1]
    assert found["NPU runtime"][0] == "fail" and says in found["NPU runtime"][1]


def test_a_public_build_with_its_ep_library_can_run_the_npu(capsys, monkeypatch, stand_in_eps):
    """No distribution name decides: the public wheel with a loadable EP library is an NPU runtime."""
    monkeypatch.setenv(ENV_EP_PATH, str(stand_in_eps["no_device"]))
    _, out = doctor_json(capsys)
    found = checks(out)
    assert found["Ryzen AI EP library"][0] == "ok"
    assert found["Ryzen AI release"][0] == "warn" and "set RYZENAI_VERSION" in found["Ryzen AI release"][1]
    assert found["NPU runtime"][0] == "skip" and "no NPU is visible here" in found["NPU runtime"][1]


def _record(site: Path, name: str, version: str, files: dict[str, bytes]) -> None:
    """A distribution's RECORD, with its files written (the last one written wins, as pip's install does)."""
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    lines = []
    for path, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        lines.append(f"{path},sha256={digest},{len(data)}")
        (site / path).parent.mkdir(parents=True, exist_ok=True)
        (site / path).write_bytes(data)
    (info / "RECORD").write_text("\n".join(lines) + "\n")


def test_a_second_distribution_writing_onnxruntime_fails_with_the_repair(capsys, installed, tmp_path):
    """chromadb's dependency on `onnxruntime` installs the plain build over AMD's onnxruntime-vitisai."""
    installed(("onnxruntime-vitisai", "1.27.0"), ("onnxruntime", "1.22.0"))
    site = tmp_path / "site-packages"
    _record(
        site, "onnxruntime-vitisai", "1.27.0", {"onnxruntime/__init__.py": b"", "onnxruntime/capi/lib.so": b"vitisai"}
    )
    _record(
        site, "onnxruntime", "1.22.0", {"onnxruntime/__init__.py": b"", "onnxruntime/capi/lib.so": b"plain cpu build"}
    )
    code, out = doctor_json(capsys)
    status, detail = checks(out)["installed distributions"]
    assert code == 1 and status == "fail"
    assert "2 installed distributions write onnxruntime/ (onnxruntime 1.22.0, onnxruntime-vitisai 1.27.0)" in detail
    assert "the files there now are onnxruntime 1.22.0's" in detail  # told from the hashes in the RECORDs
    assert "the VitisAI EP (embeddings on the NPU) is gone" in detail and "chromadb" in detail and "fastembed" in detail
    assert "`pip install --force-reinstall --no-deps <the onnxruntime-vitisai wheel" in detail


def test_an_ep_wheel_of_another_release_than_the_runtime_fails(capsys, installed):
    installed(("onnxruntime-genai-ryzenai", "0.11.2"), ("onnxruntime-providers-ryzenai", "1.8.0"))
    code, out = doctor_json(capsys)
    status, detail = checks(out)["installed distributions"]
    assert code == 1 and status == "fail"
    assert (
        "onnxruntime-providers-ryzenai 1.8.0 (the EP library of Ryzen AI 1.8) beside onnxruntime-genai-ryzenai"
        in detail
    )


def test_the_first_npu_load_warns_of_a_second_distribution(installed, tmp_path, caplog, monkeypatch, stand_in_eps):
    import logging

    from ryzenai_core import RuntimeNotAvailableError
    from ryzenai_core.generation import loader
    from ryzenai_core.generation.loader import SessionKey
    from ryzenai_core.generation.session import Session

    installed(("onnxruntime-genai-ryzenai", "0.14.0"), ("onnxruntime-vitisai", "1.27.0"), ("onnxruntime", "1.22.0"))
    site = tmp_path / "site-packages"
    _record(site, "onnxruntime-vitisai", "1.27.0", {"onnxruntime/__init__.py": b""})
    _record(site, "onnxruntime", "1.22.0", {"onnxruntime/__init__.py": b""})
    monkeypatch.setenv(ENV_EP_PATH, str(stand_in_eps["no_device"]))
    monkeypatch.setattr(loader, "_environment_checked", False)
    with caplog.at_level(logging.WARNING), pytest.raises(RuntimeNotAvailableError):
        Session(SessionKey(str(LLAMA_NPU))).load()
    assert any("2 installed distributions write onnxruntime/" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize(
    ("driver", "release", "status"),
    [("32.0.203.257", "1.6", "fail"), ("32.0.203.280", "1.6", "ok"), ("32.0.203.240", "1.8", "fail")],
)
def test_the_npu_driver_is_held_to_the_releases_minimum(capsys, strix, xrt_smi, monkeypatch, driver, release, status):
    xrt_smi(driver=driver)
    monkeypatch.setenv("RYZENAI_VERSION", release)
    _, out = doctor_json(capsys)
    found, detail = checks(out)["NPU driver"]
    assert found == status and driver in detail
    assert out["system"]["npu"]["driver_version"] == driver
    if status == "fail":
        assert "install AMD's NPU driver" in detail


def test_driver_minimums():
    assert driver_minimum("1.4.1") == ("32.0.203.257", "Ryzen AI 1.4's minimum")
    assert driver_minimum("1.8")[0] == "32.0.203.280" and "newest minimum AMD published" in driver_minimum("1.8")[1]
    assert driver_minimum(None) is None and driver_minimum("1.1") is None


def test_linux_npus_are_named_by_xrts_device_map(tmp_path):
    for slot, device, revision, driver in (
        ("0000:00:08.0", 0x14EA, 0x00, None),  # an AMD bridge
        ("0000:c5:00.1", 0x17F0, 0x10, "amdxdna"),
        ("0000:c6:00.1", 0x17F0, 0x11, "amdxdna"),
        ("0000:c7:00.1", 0x17F0, 0x20, None),
        ("0000:c8:00.1", 0x1502, 0x00, "amdxdna"),
        ("0000:c9:00.1", 0x17F1, 0x00, "amdxdna"),
        ("0000:ca:00.1", 0x1B0B, 0x00, None),
    ):
        _pci(tmp_path, slot, 0x1022, device, revision, driver)
    _pci(tmp_path, "0000:01:00.0", 0x10DE, 0x17F0, 0x00)  # another vendor's id
    found = npu_devices_linux(tmp_path / "devices")
    assert [(d["name"], d["family"], d["driver"], d["runs_llm_packages"]) for d in found] == [
        ("Strix Point (STX)", "XDNA2", "amdxdna", True),
        ("Strix Halo (STH)", "XDNA2", "amdxdna", True),
        ("Krackan Point (KRK)", "XDNA2", None, True),
        ("Phoenix / Hawk Point (PHX/HPT)", "XDNA1", "amdxdna", False),
        ("an XDNA3 NPU", "XDNA3", "amdxdna", None),
        ("an XDNA3 NPU", "XDNA3", None, None),
    ]
    assert found[0]["device"] == "0000:c5:00.1 [1022:17f0] rev 10"
    assert npu_devices_linux(tmp_path / "absent") == []


@pytest.mark.parametrize(
    ("device", "revision", "status", "says"),
    [
        (0x1502, 0x00, "fail", "do not run on XDNA1 NPUs"),
        (0x17F0, 0x11, "warn", "refuses Strix Halo (amd/RyzenAI-SW#366)"),
        (0x17F1, 0x00, "warn", "an NPU generation AMD's Ryzen AI 1.8 packages do not list"),
    ],
)
def test_npus_the_packages_do_not_or_may_not_run_on(capsys, tmp_path, monkeypatch, device, revision, status, says):
    _pci(tmp_path / "pci", "0000:c5:00.1", 0x1022, device, revision, "amdxdna")
    monkeypatch.setattr(doctor_machine, "PCI_DEVICES", tmp_path / "pci" / "devices")
    _, out = doctor_json(capsys)
    found, detail = checks(out)["NPU device"]
    assert found == status and says in detail


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
    assert npu_devices_windows("PCI\\VEN_1022&DEV_17F0&REV_11")[0]["name"] == "Strix Halo (STH)"
    assert npu_devices_windows("PCI\\VEN_1022&DEV_1B0A&REV_00")[0]["family"] == "XDNA3"
    assert npu_devices_windows("no NPU here") == []


def test_linux_settings_amds_setup_asks_for(tmp_path, monkeypatch):
    ini = tmp_path / "xrt.ini"
    ini.write_text("[Debug]\nnum_heap_pages = 8\n")
    accel = tmp_path / "accel"
    accel.mkdir()
    (accel / "accel0").write_text("")
    settings = linux_settings({"XRT_INI_PATH": str(ini)}, accel=accel, memlock=64 * 1024)
    assert settings["xrt_ini"] == {"path": str(ini), "exists": True, "num_heap_pages": 8}
    assert settings["memlock"] == 64 * 1024 and settings["accel"] == [{"node": str(accel / "accel0"), "access": True}]
    assert linux_settings({}, accel=tmp_path / "none", memlock=-1)["memlock"] is None  # unlimited
    monkeypatch.setattr(os, "access", lambda path, mode: False)  # not in the render group
    assert linux_settings({}, accel=accel, memlock=-1)["accel"][0]["access"] is False


def test_a_device_node_this_user_cannot_open_fails(capsys, strix, monkeypatch, tmp_path):
    accel = tmp_path / "accel"
    accel.mkdir()
    (accel / "accel0").write_text("")
    monkeypatch.setattr(doctor_machine, "ACCEL", accel)
    real = os.access
    monkeypatch.setattr(os, "access", lambda path, mode: False if "accel" in str(path) else real(path, mode))
    _, out = doctor_json(capsys)
    status, detail = checks(out)["NPU device access"]
    assert status == "fail" and "sudo usermod -aG render $USER" in detail


def test_power_supplies_say_ac_or_battery(tmp_path):
    def supply(name: str, kind: str, online: str | None = None) -> None:
        folder = tmp_path / name
        folder.mkdir()
        (folder / "type").write_text(kind + "\n")
        if online is not None:
            (folder / "online").write_text(online + "\n")

    assert on_ac_power(tmp_path) is None  # a desktop without supplies listed
    supply("BAT0", "Battery")
    assert on_ac_power(tmp_path) is False
    supply("ACAD", "Mains", "0")
    assert on_ac_power(tmp_path) is False
    (tmp_path / "ACAD" / "online").write_text("1\n")
    assert on_ac_power(tmp_path) is True


def test_xrt_smi_reports_are_read():
    assert power_mode(XRT_PLATFORM.format(mode="Performance")) == "Performance"
    assert power_mode("   Power Mode            : Turbo\n") == "Turbo"
    rows = "      |20696  |0       |Active  |64 KB     |57   |56     |0     |0    |Normal  |0     |0      |0    |0        |\n"
    assert hardware_contexts(XRT_PARTITIONS.format(rows=rows * 2)) == {20696: 2}
    assert hardware_contexts(XRT_PARTITIONS.format(rows="")) == {}


def test_proc_tables_show_device_nodes_and_peak_memory(tmp_path):
    fd = tmp_path / "4242" / "fd"
    fd.mkdir(parents=True)
    os.symlink("/dev/accel/accel0", fd / "7")
    os.symlink("/dev/null", fd / "0")
    (tmp_path / "4242" / "status").write_text("Name:\tpython\nVmPeak:\t 9000 kB\nVmHWM:\t  358400 kB\n")
    assert accel_files(4242, tmp_path) == ["/dev/accel/accel0"]
    assert peak_memory(4242, tmp_path) == 358400 * 1024
    assert accel_files(1, tmp_path) == [] and peak_memory(1, tmp_path) is None


# ---------------------------------------------------------------------- a model
@pytest.mark.slow
def test_the_embedded_model_is_measured_as_amd_measures(capsys):
    """AMD's plan on the CPU: 1 warm-up and 5 runs at each prompt length that fits (2048 does not: window 2048)."""
    code, out = doctor_json(capsys, "tiny-qa-llama", "--max-new-tokens", "8")
    found = checks(out)
    assert code == 0
    assert [n for n in found if n not in SYSTEM] == [
        "package",
        "package files",
        "package path",
        "chat format",
        "load",
        "generation",
        "where it ran",
        "speed at 128 tokens",
        "speed at 1024 tokens",
        "memory",
        "AMD's figures",
        "long prompt recall",
        "guidance",
        "KV reuse",
        "long prompt",
        "second load",
    ]
    speed = out["measurements"]["speed"]
    assert speed["plan"] == {"lengths": [128, 1024], "warmups": 1, "runs": 5, "new_tokens": 8, "second_load": True}
    for n in ("128", "1024"):
        figures = speed["by_prompt_length"][n]
        assert figures["generated_tokens"] == [8] * 5  # end-of-sequence held off, as AMD's benchmark does
        assert figures["ttft_seconds"]["mean"] > 0 and figures["ttft_seconds"]["median"] > 0
        assert figures["prefill_tokens_per_second"]["mean"] > 0 and figures["decode_tokens_per_second"]["median"] > 0
        assert set(figures["power"]) == {"npu_power_mode", "windows_power_mode", "ac_power"}
    assert "5 runs after 1 warm-up, 8 tokens generated" in found["speed at 128 tokens"][1]
    assert "[NPU mode unknown (no xrt-smi)" in found["speed at 1024 tokens"][1]
    assert speed["worker_peak_memory_bytes"] > 0 and out["measurements"]["second_load_seconds"] > 0
    assert found["AMD's figures"][0] == "skip" and "Phi-3.5-mini NPU 4K" in found["AMD's figures"][1]
    status, detail = found["guidance"]
    assert status == "ok" and detail.split()[-1] in ("'yes'", "'no'")
    assert found["KV reuse"][0] == "ok" and "greedy tokens equal a cold run's" in found["KV reuse"][1]
    assert out["measurements"]["kv_reuse"]["new_tokens"] == 8
    needle = out["measurements"]["needle"]
    assert 0.85 * 2048 <= needle["prompt_tokens"] <= 0.9 * 2048 and len(needle["logits"]) == 12
    assert all(step["finite"] for step in needle["logits"])


def test_an_npu_replica_is_checked_on_the_cpu_and_says_the_npu_was_not(capsys):
    code, out = doctor_json(capsys, str(LLAMA_NPU), "--quick")
    found = checks(out)
    assert code == 0
    assert found["package"][1].startswith("Llama-3.2-1B_rai_1.8.0_npu_4K (") and "full-fusion" in found["package"][1]
    assert found["package files"][0] == "ok"
    assert found["release match"][0] == "skip"
    assert (
        found["NPU load"][0] == "skip"
        and "needs onnxruntime-genai with AMD's Ryzen AI EP library" in found["NPU load"][1]
    )
    assert found["load"][0] == "ok" and "provider='cpu'" in found["load"][1]
    assert found["where it ran"][0] == "warn" and "not the NPU" in found["where it ran"][1]
    assert out["measurements"]["speed"]["plan"] == {
        "lengths": [128],
        "warmups": 0,
        "runs": 1,
        "new_tokens": 16,
        "second_load": False,
    }
    assert "second load" not in found
    assert found["KV reuse"][0] == "skip" and "--kv-reuse" in found["KV reuse"][1]


def test_kv_reuse_can_be_turned_on_to_compare_warm_and_cold(capsys):
    _, out = doctor_json(capsys, str(REPLICAS / "Qwen3-4B_rai_1.8.0_npu_4K"), "--kv-reuse", "--quick")
    status, detail = checks(out)["KV reuse"]
    assert status == "ok" and "greedy tokens equal a cold run's (time to first token" in detail
    reuse = out["measurements"]["kv_reuse"]
    assert reuse["new_tokens"] == 16 and reuse["warm_ttft_seconds"] > 0 and reuse["cold_ttft_seconds"] > 0


@pytest.mark.parametrize(("name", "shapes"), [("tiny-bert-st", ["dynamic"]), ("tiny-bert-static", ["128"])])
def test_an_embedding_folder_times_the_first_vector_of_each_shape(capsys, name, shapes):
    _, out = doctor_json(capsys, str(FIXTURES / "embeddings" / name))
    found = checks(out)
    assert found["embedding model"][0] == "ok" and found["embedding model"][1].startswith(f"{name} (")
    assert found["first vector"][0] == "warn" and "not the NPU" in found["first vector"][1]
    assert list(out["measurements"]["first_vector_seconds"]) == shapes


@pytest.mark.parametrize("name", ["tiny-bert-cross-encoder", "tiny-xlmr-reranker-static"])
def test_a_reranker_is_checked_as_a_reranker(capsys, name):
    code, out = doctor_json(capsys, str(FIXTURES / "rerank" / name))
    found = checks(out)
    assert code == 0 and "embedding model" not in found
    status, detail = found["reranker"]
    assert status == "ok" and detail.startswith(f"{name} (") and "pairs as " in detail and "query" in detail
    assert "scores are the sigmoid of its logit" in detail or "scores are the identity of its logit" in detail
    assert found["first score"][0] == "warn" and "2 passages scored in" in found["first score"][1]
    assert len(out["measurements"]["scores"]) == 2 and out["measurements"]["first_score_seconds"] > 0


def test_lfs_pointers_fail_and_nothing_is_loaded(capsys):
    code, out = doctor_json(capsys, str(REPLICAS / "Llama-3.2-1B_rai_1.8.0_npu_4K-lfs-pointers"))
    found = checks(out)
    assert code == 1 and found["package files"][0] == "fail" and "git lfs pull" in found["package files"][1]
    assert "load" not in found and "generation" not in found


def test_a_missing_cache_fails_and_a_path_hazard_warns(capsys, monkeypatch, copy_package):
    import shutil

    folder = copy_package(LLAMA_NPU, "Modèles-Llama-3.2-1B_rai_1.8.0_npu_4K")
    shutil.rmtree(folder / "cache")
    monkeypatch.setattr(package_module, "NARROW_PATHS", True)  # judged as on Windows
    monkeypatch.setattr(package_module, "windows_path_settings", lambda: (False, False))
    code, out = doctor_json(capsys, str(folder), "--quick")
    found = checks(out)
    assert code == 1 and found["package files"] == ("fail", "missing cache/: download the package again")
    assert found["package path"][0] == "warn" and "non-ASCII characters (è)" in found["package path"][1]
    assert "set HF_HOME=C:\\hf" in found["package path"][1]


def test_a_missing_model_is_a_failed_check(capsys, tmp_path):
    code, out = doctor_json(capsys, str(tmp_path / "nowhere"))
    assert code == 1 and checks(out)["package"][0] == "fail"


# ---------------------------------------------------------------------- where it ran, and was it right
def _where(pkg: ModelPackage, device: str, pid: int | None = None) -> tuple[str, str, dict]:
    report = Report()
    engine = SimpleNamespace(worker_pid=lambda: pid or os.getpid())
    doctor_run.check_where(report, engine, pkg, None, device)
    return report.checks[-1].status, report.checks[-1].detail, report.measurements["where"]


def test_the_workers_hardware_contexts_say_it_ran_on_the_npu(xrt_smi):
    xrt_smi(pids=(os.getpid(), 1))
    status, detail, facts = _where(ModelPackage.open(LLAMA_NPU), "RyzenAI")
    assert status == "ok" and detail.startswith("prefill and decode on the NPU: 1 NPU hardware context(s) held by")
    assert facts["hardware_contexts"] == 1
    status, detail, _ = _where(ModelPackage.open(REPLICAS / "Llama-3.2-1B_rai_1.8.0_hybrid"), "RyzenAI")
    assert status == "ok" and detail.startswith("prefill on the NPU, decode on the iGPU (a hybrid package)")


def test_no_hardware_context_for_the_worker_is_a_warning(xrt_smi):
    xrt_smi(pids=(1,))  # another process holds the NPU
    status, detail, facts = _where(ModelPackage.open(LLAMA_NPU), "RyzenAI")
    assert status == "warn" and "holds no NPU hardware context" in detail and facts["hardware_contexts"] == 0


def test_a_custom_op_layout_reporting_cpu_is_not_called_off_the_npu(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # no xrt-smi
    monkeypatch.setattr(doctor_run.sys, "platform", "win32")  # no /proc to read either
    status, detail, _ = _where(ModelPackage.open(REPLICAS / "Qwen-2.5-1.5B-Instruct-onnx-ryzenai-npu"), "CPU")
    assert status == "skip" and "as the 1.3-1.6 custom-op layouts always do" in detail and "not the NPU" not in detail


class _Engine:
    """A loaded model's engine whose probe reports what a broken NPU run reports."""

    def __init__(self, real, logits) -> None:
        self.real, self.logits = real, logits

    def __getattr__(self, name):
        return getattr(self.real, name)

    def probe(self, ids, steps, **_):
        return {"tokens": self.real.encode(" 4711"), "logits": self.logits}


def test_the_long_prompt_check_fails_on_logits_that_are_not_finite():
    from ryzenai_core.engine.engine import Engine
    from ryzenai_core.generation.loader import SessionKey

    engine = Engine(SessionKey(str(FIXTURES / "models" / "tiny-llama")), "inline")
    pkg = engine.package
    try:
        report = Report()
        doctor_run.check_needle(report, _Engine(engine, [{"finite": True, "nan": 0, "inf": 0}] * 12), pkg)
        assert report.checks[-1].status == "ok" and "names the code" in report.checks[-1].detail
        bad = [{"finite": True, "nan": 0, "inf": 0}] * 2 + [{"finite": False, "nan": 3, "inf": 0}]
        doctor_run.check_needle(report, _Engine(engine, bad), pkg)
        assert (
            report.checks[-1].status == "fail"
            and "the logits of decode step 3 are not finite (3 NaN" in report.checks[-1].detail
        )
    finally:
        engine.close()


def test_a_download_missing_its_weights_file_fails_the_file_check(capsys, tmp_path):
    """An interrupted Hugging Face download: model.onnx.data is gone, and the fix is the pull that fetches it."""
    from hf_cache import cache_repository

    snapshot = cache_repository(tmp_path / "hub", "amd/Llama-3.2-1B_rai_1.8.0_npu_4K", LLAMA_NPU)
    (snapshot / "model.onnx.data").unlink()
    code, out = doctor_json(capsys, str(snapshot))
    found = checks(out)
    status, detail = found["package files"]
    assert code == 1 and status == "fail" and detail.startswith("model.onnx.data is missing from ")
    assert "`ryzenai-llm pull amd/Llama-3.2-1B_rai_1.8.0_npu_4K`" in detail
    assert "load" not in found  # nothing is loaded: the runtime would only say the path "escapes model directory"


# ---------------------------------------------------------------------- measured as AMD measures
class _Timed:
    """An engine whose runs take what a laptop's take: ``ttft`` seconds to the first token, ``rate`` tokens/s."""

    def __init__(self, ttft: float, rate: float) -> None:
        self.ttft, self.rate, self.runs = ttft, rate, []

    def encode(self, text: str) -> list[int]:
        return list(range(len(text.split())))

    def worker_pid(self) -> None:
        return None

    def probe(self, ids, steps, *, watch=True, exact=False):
        self.runs.append((len(ids), steps, watch, exact))
        return {
            "tokens": [1] * steps,
            "logits": [],
            "first_token_seconds": self.ttft,
            "decode_tokens_per_second": self.rate,
        }


@pytest.mark.parametrize(("ttft", "rate", "status"), [(0.150, 52.0, "ok"), (0.400, 30.0, "warn")])
def test_figures_are_compared_with_amds_published_ones(ttft, rate, status):
    from ryzenai_cli import doctor_measure

    name = "Phi-3.5-mini-instruct_rai_1.8.0_npu_4K"
    plan = doctor_measure.measurement_plan(4096, 4095, name, quick=False, new_tokens=None)
    assert plan.lengths == (128, 1024, 2048) and (plan.warmups, plan.runs, plan.new_tokens) == (1, 5, 128)
    engine, report = _Timed(ttft, rate), Report()
    context = {"npu_power_mode": "Performance", "windows_power_mode": None, "ac_power": True}
    doctor_measure.measure(report, engine, SimpleNamespace(name=name), plan, context)
    assert engine.runs[:6] == [(128, 128, False, True)] * 6  # 1 warm-up + 5 runs, end-of-sequence held off
    assert len(engine.runs) == 18
    found = {c.name: (c.status, c.detail) for c in report.checks}
    assert found["speed at 128 tokens"][1].endswith("[NPU mode Performance, on AC]")
    got, detail = found["AMD's figures"]
    assert got == status and "Phi-3.5-mini NPU 4K, Ryzen AI 1.8 on Linux" in detail
    if status == "warn":
        assert "more than 30% below" in detail and "xrt-smi configure --pmode performance" in detail
    assert report.measurements["speed"]["by_prompt_length"]["128"]["power"]["npu_power_mode"] == "Performance"


def test_the_power_mode_stands_beside_every_figure(capsys, xrt_smi):
    xrt_smi(mode="Balanced")
    _, out = doctor_json(capsys, "tiny-qa-llama", "--quick")
    found = checks(out)
    assert "[NPU mode Balanced" in found["speed at 128 tokens"][1] and "[NPU mode Balanced" in found["memory"][1]
    assert out["measurements"]["speed"]["power"]["npu_power_mode"] == "Balanced"


@pytest.mark.slow
def test_a_package_fed_in_runs_gets_a_prompt_over_its_run_length(capsys, copy_package):
    """A 16K window with chunked context declared: doctor sends a prompt over one run, and its needle at 0.9 x the limit."""
    folder = copy_package(REPLICAS / "Gemma-3-4b_rai_1.8.0_npu_16K", "Gemma-3-4b_rai_1.8.0_npu_16K")
    cfg = json.loads((folder / "genai_config.json").read_text())
    cfg["search"]["max_length"] = 16384
    cfg["model"]["decoder"]["session_options"]["provider_options"][0]["RyzenAI"]["hybrid_opt_chunk_context"] = "1"
    (folder / "genai_config.json").write_text(json.dumps(cfg))
    _, out = doctor_json(capsys, str(folder), "--quick", "--max-new-tokens", "4")
    found = checks(out)
    status, detail = found["long prompt"]
    assert status == "ok" and detail.startswith("4608 tokens (over the 4096-token run length) in 2 prefill run(s)")
    assert out["measurements"]["long_prompt"]["prefill_runs"] == 2
    needle = out["measurements"]["needle"]
    assert needle["prompt_tokens"] > 4096 * 3 and all(step["finite"] for step in needle["logits"])


def test_windows_path_settings_are_reported(capsys, monkeypatch):
    import sys as real_sys

    windows = SimpleNamespace(platform="win32", executable=real_sys.executable, prefix=real_sys.prefix)
    monkeypatch.setattr(doctor_machine, "sys", windows)  # judged as on Windows (pnputil is not here: no NPU listed)
    monkeypatch.setattr(doctor_machine, "windows_path_settings", lambda: (False, False))
    _, out = doctor_json(capsys)
    status, detail = checks(out)["Windows paths"]
    assert status == "warn" and "LongPathsEnabled off" in detail and "HF_HOME=C:\\hf" in detail
    assert "non-ASCII folder names may not open" in detail
    assert out["system"]["windows"] == {"long_paths_enabled": False, "utf8_code_page": False}
    monkeypatch.setattr(doctor_machine, "windows_path_settings", lambda: (True, True))
    _, out = doctor_json(capsys)
    assert checks(out)["Windows paths"] == ("ok", "LongPathsEnabled on; ANSI code page UTF-8")
