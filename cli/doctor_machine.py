"""``ryzenai-llm doctor``'s checks of the machine: runtimes, release, the Ryzen AI EP library, the NPU.

The onnxruntime-genai and onnxruntime builds and versions (each imported in a child process,
so that a build that cannot load is reported rather than fatal, and the two runtimes never
share this process), the Ryzen AI release they mean, where onnxruntime-genai will find the
Ryzen AI EP library (or why it will not), and whether an AMD NPU and its driver are visible,
as AMD's own tools tell: the PCI device (``1022:17F0`` Strix/Krackan, ``1022:1502``
Phoenix/Hawk Point), the driver bound to it, and ``xrt-smi``.
"""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from ryzenai_core.package.runtime import (
    ENV_RELEASE,
    EpSearch,
    env_release,
    find_ryzenai_ep,
    runtime_info,
)

from .doctor_report import Report, Status

__all__ = ["KRACKAN_REVISION", "NPU_DEVICE_IDS", "XRT_SMI", "check_system", "npu_devices_linux", "npu_devices_windows"]

#: AMD NPU PCI device ids (vendor 0x1022), as AMD's Ryzen AI documentation lists them.
NPU_DEVICE_IDS = {0x1502: "Phoenix / Hawk Point (PHX/HPT)", 0x17F0: "Strix Point (STX)"}
#: The 0x17F0 revision that is Krackan Point.
KRACKAN_REVISION = 0x20
#: Where the Ryzen AI installers put ``xrt-smi``.
XRT_SMI = {"win32": Path(r"C:\Windows\System32\AMD\xrt-smi.exe"), "linux": Path("/opt/xilinx/xrt/bin/xrt-smi")}

_OGA_PROBE = (
    "import json, onnxruntime_genai as og; "
    "print(json.dumps({'file': og.__file__, 'version': getattr(og, '__version__', None), "
    "'device_type': hasattr(og.Model, 'device_type')}))"
)
_ORT_PROBE = (
    "import json, onnxruntime as ort; "
    "print(json.dumps({'file': ort.__file__, 'version': ort.__version__, 'providers': ort.get_available_providers()}))"
)

def _probe(code: str) -> tuple[dict[str, Any] | None, str]:
    """Run ``code`` in a child Python; (its JSON line, or None, and the error's last line)."""
    try:
        done = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"{type(exc).__name__}: {exc}"
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode == 0 and lines:
        return json.loads(lines[-1]), ""
    errors = [line for line in done.stderr.strip().splitlines() if line.strip()]
    return None, errors[-1] if errors else f"exit code {done.returncode}"


def _distribution(prefix: str, exclude: str | None = None) -> str | None:
    """'name version' of the installed distributions whose name starts with ``prefix``."""
    import importlib.metadata as md

    found = sorted(
        f"{d.metadata['Name']} {d.version}"
        for d in md.distributions()
        if (d.metadata["Name"] or "").lower().startswith(prefix) and not (exclude and exclude in d.metadata["Name"])
    )
    return ", ".join(dict.fromkeys(found)) or None


def _check_oga(report: Report) -> bool:
    """The onnxruntime-genai check; whether it can be imported."""
    info = runtime_info()
    report.system["onnxruntime_genai"] = {
        "distribution": info.distribution,
        "version": info.version,
        "ryzenai_build": info.ryzenai,
        "release": info.release,
    }
    if not info.installed:
        report.add(
            "onnxruntime-genai",
            "fail",
            "not installed: on a Ryzen AI PC activate the environment the Ryzen AI installer created "
            "(`conda activate ryzen-ai-1.8.0`); elsewhere `pip install 'ryzenai-llm[cpu]'`",
        )
        return False
    probe, error = _probe(_OGA_PROBE)
    if probe is None:
        report.add("onnxruntime-genai", "fail", f"{info.describe()}, but importing it fails: {error}")
        return False
    report.system["onnxruntime_genai"]["file"] = probe["file"]
    where = f" ({Path(probe['file']).parent})"
    if info.ryzenai:
        status: Status = "ok" if info.release else "warn"
        known = "" if info.release else f"; its version maps to no Ryzen AI release known here (set {ENV_RELEASE})"
        report.add("onnxruntime-genai", status, f"{info.describe()}{where}{known}")
    else:
        report.add(
            "onnxruntime-genai",
            "warn",
            f"{info.describe()}{where}: Ryzen AI packages run here only on the CPU (provider='cpu', their plain "
            "ONNX weights); the NPU needs AMD's build, in the Ryzen AI installer's environment",
        )
    return True


def _check_ort(report: Report) -> None:
    dist = _distribution("onnxruntime", exclude="genai")
    probe, error = _probe(_ORT_PROBE)
    report.system["onnxruntime"] = {"distributions": dist, **(probe or {})}
    if probe is None:
        detail = f"{dist} cannot be imported: {error}" if dist else "not installed"
        report.add("onnxruntime", "warn", f"{detail}; embedding models need it (`pip install 'ryzenai-llm[cpu]'`)")
        return
    providers = ", ".join(probe["providers"])
    if "VitisAIExecutionProvider" in probe["providers"]:
        report.add("onnxruntime", "ok", f"{dist}: providers {providers} (embeddings on the NPU)")
    else:
        report.add(
            "onnxruntime",
            "warn",
            f"{dist}: providers {providers}; no VitisAIExecutionProvider, so embeddings run on the CPU",
        )


def _check_release(report: Report) -> None:
    info = runtime_info()
    env = env_release()
    report.system["release"] = env or info.release
    if env:
        report.add("Ryzen AI release", "ok", f"{env}, from {ENV_RELEASE} (the installed runtime says {info.release})")
    elif info.ryzenai and info.release:
        report.add("Ryzen AI release", "ok", f"{info.release}, the release of {info.distribution} {info.version}")
    elif info.ryzenai:
        report.add("Ryzen AI release", "warn", f"unknown for {info.distribution} {info.version}: set {ENV_RELEASE}")
    else:
        report.add("Ryzen AI release", "skip", "no Ryzen AI build of onnxruntime-genai installed")


def _check_ep(report: Report) -> EpSearch:
    ep = find_ryzenai_ep()
    report.system["ep_library"] = {
        "file": ep.filename,
        "path": str(ep.path) if ep.path else None,
        "source": ep.source,
        "searched": [[place, str(path)] for place, path in ep.searched],
        "missing_dlls": list(ep.missing_dlls),
    }
    info = runtime_info()
    if info.ryzenai and not _searches_for_the_ep(info.version):
        report.add(
            "Ryzen AI EP library",
            "skip",
            f"{info.distribution} {info.version} is older than onnxruntime-genai 0.12, whose RyzenAI code looks for "
            f"the EP library; how this build finds its provider is not checked here. ({ep.describe()})",
        )
        return ep
    needed = info.ryzenai
    if ep.found:
        if ep.missing_dlls:
            report.add(
                "Ryzen AI EP library",
                "warn",
                f"{ep.describe()}; {', '.join(ep.missing_dlls)} missing beside onnxruntime-genai (AMD's tools check "
                "for them before they load an NPU package)",
            )
        else:
            report.add("Ryzen AI EP library", "ok", ep.describe())
    elif needed:
        report.add("Ryzen AI EP library", "fail", ep.describe())
    else:
        report.add("Ryzen AI EP library", "skip", f"only AMD's build loads it; {ep.describe()}")
    return ep


def _searches_for_the_ep(version: str | None) -> bool:
    """Whether an onnxruntime-genai version has the RyzenAI code that looks for the EP library (0.12 on)."""
    m = re.match(r"(\d+)\.(\d+)", version or "")
    return m is not None and (int(m.group(1)), int(m.group(2))) >= (0, 12)


def npu_devices_linux(sysfs: Path = Path("/sys/bus/pci/devices")) -> list[dict[str, Any]]:
    """AMD NPUs among the PCI devices in ``sysfs``, with the driver bound to each (``amdxdna``) or None."""
    found = []
    for dev in sorted(sysfs.glob("*")) if sysfs.is_dir() else []:
        try:
            vendor = int((dev / "vendor").read_text().strip(), 16)
            device = int((dev / "device").read_text().strip(), 16)
            revision = int((dev / "revision").read_text().strip(), 16) if (dev / "revision").is_file() else 0
        except (OSError, ValueError):
            continue
        if vendor != 0x1022 or device not in NPU_DEVICE_IDS:
            continue
        driver = os.path.basename(os.readlink(dev / "driver")) if (dev / "driver").is_symlink() else None
        found.append(_npu(device, revision, f"{dev.name} [1022:{device:04x}] rev {revision:02x}", driver))
    return found


def npu_devices_windows(pnputil_output: str, driver_version: str | None = None) -> list[dict[str, Any]]:
    """AMD NPUs in the output of ``pnputil /enum-devices /bus PCI /deviceids`` (what AMD's quicktest reads)."""
    found = {}
    for m in re.finditer(
        r"PCI\\VEN_1022&DEV_(1502|17F0)(?:&SUBSYS_[0-9A-F]+)?&REV_([0-9A-F]{2})", pnputil_output, re.I
    ):
        key = m.group(0).upper()
        found[key] = _npu(int(m.group(1), 16), int(m.group(2), 16), key, driver_version)
    return list(found.values())


def _npu(device: int, revision: int, where: str, driver: str | None) -> dict[str, Any]:
    name = "Krackan Point (KRK)" if device == 0x17F0 and revision == KRACKAN_REVISION else NPU_DEVICE_IDS[device]
    return {"name": name, "device": where, "driver": driver, "runs_llm_packages": device == 0x17F0}


def _windows_npus() -> tuple[list[dict[str, Any]], list[str]]:
    notes = []
    try:
        listing = subprocess.run(
            ["pnputil", "/enum-devices", "/bus", "PCI", "/deviceids"], capture_output=True, text=True, timeout=60
        ).stdout
    except (OSError, subprocess.TimeoutExpired) as exc:
        return [], [f"pnputil failed ({exc})"]
    version = None
    query = (
        "Get-WmiObject -Class Win32_PnPSignedDriver | Where-Object { $_.DeviceName -like "
        '"*NPU Compute Accelerator Device*" } | Select-Object -ExpandProperty DriverVersion'
    )
    try:
        out = subprocess.run(
            ["powershell", "-NoProfile", "-ExecutionPolicy", "Bypass", "-Command", query],
            capture_output=True,
            text=True,
            timeout=60,
        ).stdout.strip()
        version = out.splitlines()[0].strip() if out else None
    except (OSError, subprocess.TimeoutExpired) as exc:
        notes.append(f"the driver version could not be read ({exc})")
    return npu_devices_windows(listing, f"NPU driver {version}" if version else None), notes


def _check_npu(report: Report) -> None:
    needed = runtime_info().ryzenai
    notes: list[str] = []
    if sys.platform == "win32":
        devices, notes = _windows_npus()
        accel: list[str] = []
    elif sys.platform.startswith("linux"):
        devices = npu_devices_linux()
        accel = sorted(str(p) for p in Path("/dev/accel").glob("accel*")) if Path("/dev/accel").is_dir() else []
    else:
        report.add("NPU device", "skip", f"{sys.platform}: Ryzen AI runs on Windows and Linux only")
        return
    xrt = XRT_SMI.get("win32" if sys.platform == "win32" else "linux")
    xrt_smi = shutil.which("xrt-smi") or (str(xrt) if xrt is not None and xrt.is_file() else None)
    report.system["npu"] = {"devices": devices, "accel_nodes": accel, "xrt_smi": xrt_smi}
    unverified = (
        "whether the runtime can open it is shown only by loading a package (`ryzenai-llm doctor MODEL`: "
        "'No RyzenAI devices detected' means it cannot)"
    )
    tools = f"; xrt-smi at {xrt_smi} (`xrt-smi examine` lists the NPU)" if xrt_smi else "; no xrt-smi found"
    if not devices:
        status: Status = "fail" if needed else "skip"
        report.add(
            "NPU device",
            status,
            "no AMD NPU among the PCI devices (1022:17F0 Strix/Krackan, 1022:1502 Phoenix/Hawk Point)"
            + ("; " + "; ".join(notes) if notes else "")
            + (" (this machine has none: the NPU checks cannot run here)" if not needed else ""),
        )
        return
    shown = "; ".join(f"{d['name']} at {d['device']}, driver {d['driver'] or 'none bound'}" for d in devices)
    if not any(d["runs_llm_packages"] for d in devices):
        report.add("NPU device", "fail", f"{shown}: AMD's LLM packages run on Strix and Krackan NPUs only{tools}")
    elif not any(d["driver"] for d in devices):
        report.add(
            "NPU device",
            "fail" if needed else "warn",
            f"{shown}: no driver is bound to it; install AMD's NPU driver for your Ryzen AI release{tools}",
        )
    else:
        nodes = f"; device nodes {', '.join(accel)}" if accel else ""
        report.add("NPU device", "ok", f"{shown}{nodes}{tools}; {unverified}")


def check_system(report: Report) -> None:
    """The machine's checks (no model)."""
    report.system["platform"] = f"{platform.system()} {platform.release()} ({platform.machine()})"
    report.system["python"] = f"{platform.python_version()} ({sys.executable})"
    report.add("platform", "ok", f"{report.system['platform']}, Python {report.system['python']}")
    _check_oga(report)
    _check_ort(report)
    _check_release(report)
    _check_ep(report)
    _check_npu(report)
