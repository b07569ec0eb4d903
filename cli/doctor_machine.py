"""``ryzenai-llm doctor``'s checks of the machine: where a user would fail before any model loads.

In order: the interpreter (the one that runs ``doctor`` must be the application's); the
onnxruntime-genai and onnxruntime builds (each imported in a child process, so that a build
that cannot load is reported rather than fatal, and the two runtimes never share this
process); distributions that overwrite each other's files; the Ryzen AI EP library, found
where onnxruntime-genai looks and loaded in a child process (this, not a distribution's
name, decides whether the NPU can run); the Ryzen AI release; the NPU as the PCI bus and
AMD's ``xrt-smi`` show it, its driver against the release's minimum, and the verdict: an NPU
with no runtime that can use it fails. On Linux, what AMD's Linux setup asks for
(``LD_LIBRARY_PATH``, ``XRT_INI_PATH``, memlock, ``/dev/accel`` access); on Windows the
settings that decide which package paths the native loader opens.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from functools import lru_cache
from pathlib import Path
from typing import Any

from ryzenai_core.package import ep as ep_module
from ryzenai_core.package.ep import EP_SEARCH_SINCE, NpuRuntime, npu_runtime
from ryzenai_core.package.runtime import (
    ENV_RELEASE,
    distributions_named,
    env_release,
    release_for_oga_version,
    runtime_info,
    setup_hint,
    shared_folders,
)
from ryzenai_core.package.scan import windows_path_settings

from . import doctor_npu
from .doctor_report import Report

__all__ = ["check_system", "npu_devices"]

#: Where the machine's facts are read (tests point these at stand-in tables).
PCI_DEVICES = Path("/sys/bus/pci/devices")
ACCEL = Path("/dev/accel")

_OGA_PROBE = (
    "import json, onnxruntime_genai as og; "
    "print(json.dumps({'file': og.__file__, 'version': getattr(og, '__version__', None), "
    "'device_type': hasattr(og.Model, 'device_type')}))"
)
_ORT_PROBE = (
    "import json, onnxruntime as ort; "
    "print(json.dumps({'file': ort.__file__, 'version': ort.__version__, 'providers': ort.get_available_providers()}))"
)
#: The wheel AMD ships the RyzenAI EP library in from Ryzen AI 1.8 on; its version is the release.
EP_WHEEL = "onnxruntime-providers-ryzenai"


@lru_cache(maxsize=4)
def _probe(code: str) -> tuple[dict[str, Any] | None, str]:
    """Run ``code`` in a child Python; (its JSON line, or None, and the error's last line). Once per process."""
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


def _check_platform(report: Report) -> None:
    report.system["platform"] = f"{platform.system()} {platform.release()} ({platform.machine()})"
    report.system["python"] = f"{platform.python_version()} ({sys.executable})"
    env = os.environ.get("CONDA_PREFIX") or os.environ.get("VIRTUAL_ENV")
    report.system["interpreter"] = {
        "executable": sys.executable,
        "prefix": sys.prefix,
        "conda_prefix": os.environ.get("CONDA_PREFIX"),
        "virtual_env": os.environ.get("VIRTUAL_ENV"),
    }
    where = f"environment {env}" if env else f"no conda or virtual environment active (prefix {sys.prefix})"
    report.add(
        "platform",
        "ok",
        f"{report.system['platform']}, Python {platform.python_version()} at {sys.executable}; {where}. These checks "
        "are of this interpreter's environment: run doctor with your application's interpreter",
    )


def _check_oga(report: Report) -> bool:
    """The onnxruntime-genai check; whether it can be imported."""
    info = runtime_info()
    report.system["onnxruntime_genai"] = {
        "distribution": info.distribution,
        "version": info.version,
        "ryzenai_build": info.ryzenai,
        "release": info.release or (release_for_oga_version(info.version) if info.version else None),
    }
    if not info.installed:
        report.add(
            "onnxruntime-genai",
            "fail",
            f"not installed: on a Ryzen AI PC, {setup_hint()}; elsewhere `pip install 'ryzenai-llm[cpu]'`",
        )
        return False
    probe, error = _probe(_OGA_PROBE)
    if probe is None:
        report.add("onnxruntime-genai", "fail", f"{info.describe()}, but importing it fails: {error}")
        return False
    report.system["onnxruntime_genai"]["file"] = probe["file"]
    release = report.system["onnxruntime_genai"]["release"]
    maps = f"; its version is Ryzen AI {release}'s" if release else "; its version is no Ryzen AI release's known here"
    report.add("onnxruntime-genai", "ok", f"{info.describe()} ({Path(probe['file']).parent}){maps}")
    return True


def _check_ort(report: Report) -> None:
    dists = distributions_named("onnxruntime", exclude="genai")
    named = ", ".join(f"{n} {v}" for n, v in dists) or None
    probe, error = _probe(_ORT_PROBE)
    report.system["onnxruntime"] = {"distributions": named, **(probe or {})}
    if probe is None:
        detail = f"{named} cannot be imported: {error}" if named else "not installed"
        report.add("onnxruntime", "warn", f"{detail}; embedding models need it (`pip install 'ryzenai-llm[cpu]'`)")
        return
    providers = ", ".join(probe["providers"])
    if "VitisAIExecutionProvider" in probe["providers"]:
        report.add("onnxruntime", "ok", f"{named}: providers {providers} (embeddings on the NPU)")
    else:
        detail = f"{named}: providers {providers}; no VitisAIExecutionProvider, so embeddings run on the CPU"
        report.add("onnxruntime", "warn", detail)


def _checkdistributions_named(report: Report) -> None:
    """Two builds in one import folder, or an EP wheel of another release than onnxruntime-genai."""
    shared = shared_folders(check_files=True)
    problems = [s.describe() for s in shared]
    info = runtime_info()
    wheel = distributions_named(EP_WHEEL)
    runtime_release = info.release or (release_for_oga_version(info.version) if info.version else None)
    if wheel and runtime_release:
        version = wheel[0][1]
        if ".".join(version.split(".")[:2]) != runtime_release:
            problems.append(
                f"{EP_WHEEL} {version} (the EP library of Ryzen AI {'.'.join(version.split('.')[:2])}) beside "
                f"{info.distribution} {info.version} (Ryzen AI {runtime_release}): one release's environment holds "
                f"both. Repair: `pip install --force-reinstall --no-deps` the wheels of one Ryzen AI release"
            )
    report.system["shared_folders"] = [s.__dict__ for s in shared]
    if problems:
        report.add("installed distributions", "fail", " ".join(problems))
    else:
        report.add("installed distributions", "ok", "each of onnxruntime/ and onnxruntime_genai/ is one distribution's")


def _check_ep(report: Report, runtime: NpuRuntime) -> None:
    info = runtime.info
    ep = runtime.ep if runtime.ep is not None else ep_module.find_ryzenai_ep()
    report.system["ep_library"] = {
        "file": ep.filename,
        "path": str(ep.path) if ep.path else None,
        "source": ep.source,
        "runtime_finds_it": ep.runtime_finds,
        "searched": [[place, str(path)] for place, path in ep.searched],
        "missing_dlls": list(ep.missing_dlls),
        "load": None if runtime.load is None else runtime.load.__dict__,
    }
    if not info.installed:
        report.add("Ryzen AI EP library", "skip", "no onnxruntime-genai to load it")
        return
    if runtime.ep is None:
        kind = "AMD's build" if info.ryzenai else "a public build"
        since = ".".join(str(n) for n in EP_SEARCH_SINCE)
        report.add(
            "Ryzen AI EP library",
            "skip",
            f"{info.distribution} {info.version} ({kind}) is older than onnxruntime-genai {since}, whose RyzenAI code "
            f"looks for the EP library; how this build finds its provider is not checked here. ({ep.describe()})",
        )
        return
    if ep.path is None:
        report.add("Ryzen AI EP library", "fail" if info.ryzenai else "skip", ep.describe())
        return
    load = runtime.load
    if load is not None and not load.ok:
        report.add("Ryzen AI EP library", "fail", load.explain(ep.path))
        return
    dlls = (
        f"; {', '.join(ep.missing_dlls)} missing beside onnxruntime-genai (Lemonade checks for them with Ryzen AI 1.6)"
        if ep.missing_dlls
        else ""
    )
    report.add("Ryzen AI EP library", "warn" if dlls else "ok", f"{ep.describe()}; it loads in a child process{dlls}")


def _check_release(report: Report, runtime: NpuRuntime) -> None:
    env = env_release()
    report.system["release"] = env or runtime.release
    if env:
        report.add("Ryzen AI release", "ok", f"{env}, from {ENV_RELEASE} (the runtime says {runtime.release})")
    elif runtime.release and (runtime.usable or runtime.info.ryzenai):
        report.add("Ryzen AI release", "ok", f"{runtime.release}, the release of {runtime.describe()}")
    elif runtime.usable or runtime.info.ryzenai:
        report.add(
            "Ryzen AI release",
            "warn",
            f"unknown: {runtime.info.distribution} {runtime.info.version} is no Ryzen AI release's known here; set "
            f"{ENV_RELEASE} to the release of your Ryzen AI installation (prompt limits and package checks use it)",
        )
    else:
        report.add("Ryzen AI release", "skip", "no runtime here can run Ryzen AI packages")


def npu_devices(report: Report) -> tuple[list[dict[str, Any]], str | None]:
    """This machine's NPUs and the NPU driver version (from Windows, or ``xrt-smi examine``), into ``report.system``."""
    notes: list[str] = []
    version = None
    if sys.platform == "win32":
        devices, version, notes = doctor_npu.windows_npus()
    else:
        devices = doctor_npu.npu_devices_linux(PCI_DEVICES)
    examine = doctor_npu.xrt_smi("examine") if devices else None
    version = version or (doctor_npu.xrt_driver_version(examine) if examine else None)
    report.system["npu"] = {
        "devices": devices,
        "driver_version": version,
        "xrt_smi": doctor_npu.xrt_smi_path(),
        "notes": notes,
    }
    return devices, version


def _check_npu(report: Report, devices: list[dict[str, Any]], runtime: NpuRuntime) -> None:
    tool = report.system["npu"]["xrt_smi"]
    tools = f"; xrt-smi at {tool} (`xrt-smi examine` lists the NPU)" if tool else "; no xrt-smi found"
    if not devices:
        notes = report.system["npu"]["notes"]
        report.add(
            "NPU device",
            "skip",
            "no AMD NPU among the PCI devices (1022:17F0 Strix/Krackan, 1022:1502 Phoenix/Hawk Point, XDNA3 "
            "1022:17F1-17F3/1B0A/1B0B)"
            + ("; " + "; ".join(notes) if notes else "")
            + ": the NPU checks cannot run here",
        )
        return
    shown = "; ".join(
        f"{d['name']} ({d['family']}) at {d['device']}, driver {d['driver'] or 'none bound'}" for d in devices
    )
    best = max(devices, key=lambda d: {True: 2, None: 1, False: 0}[d["runs_llm_packages"]])
    if best["runs_llm_packages"] is False:
        why = "AMD's LLM packages do not run on XDNA1 NPUs (Phoenix/Hawk Point)"
        report.add("NPU device", "fail", f"{shown}: {why}{tools}")
    elif not any(d["driver"] for d in devices):
        report.add("NPU device", "fail", f"{shown}: no driver is bound to it; install AMD's NPU driver{tools}")
    elif best["runs_llm_packages"] is None:
        report.add(
            "NPU device",
            "warn",
            f"{shown}: an NPU generation AMD's Ryzen AI 1.8 packages do not list; whether they run is unknown{tools}",
        )
    elif best["name"].startswith("Strix Halo") and sys.platform.startswith("linux"):
        report.add(
            "NPU device",
            "warn",
            f"{shown}: AMD's Ryzen AI Linux software refuses Strix Halo (amd/RyzenAI-SW#366); Windows runs it{tools}",
        )
    else:
        report.add("NPU device", "ok", f"{shown}{tools}")


def _check_driver(report: Report, devices: list[dict[str, Any]], version: str | None) -> None:
    if not devices:
        return
    release = report.system.get("release")
    minimum = doctor_npu.driver_minimum(release)
    if version is None:
        report.add("NPU driver", "skip", "its version could not be read (Windows: Device Manager; `xrt-smi examine`)")
        return
    have = doctor_npu.version_tuple(version)
    if minimum is None or have is None or len(have) != 4:
        report.add("NPU driver", "ok", f"version {version} (no minimum to compare it with for release {release})")
        return
    least, source = minimum
    need = doctor_npu.version_tuple(least)
    if need is not None and have < need:
        report.add(
            "NPU driver",
            "fail",
            f"version {version} is below {least} ({source}): install AMD's NPU driver for your Ryzen AI release "
            "(an old driver shows as 'No RyzenAI devices detected' or native errors)",
        )
    else:
        report.add("NPU driver", "ok", f"version {version}, at least {least} ({source})")


def _check_verdict(report: Report, devices: list[dict[str, Any]], runtime: NpuRuntime) -> None:
    llm_npu = any(d["runs_llm_packages"] is not False for d in devices)
    if runtime.usable:
        report.add(
            "NPU runtime",
            "ok" if devices else "skip",
            f"{runtime.describe()} can run Ryzen AI packages"
            + ("" if devices else "; but no NPU is visible here (`No RyzenAI devices detected` at load)"),
        )
    elif llm_npu:
        report.add(
            "NPU runtime",
            "fail",
            f"this PC has an NPU, but no runtime here can use it: {runtime.problem}. Ryzen AI packages would run only "
            "on the CPU (provider='cpu')",
        )
    else:
        report.add("NPU runtime", "skip", "no NPU here, and no runtime that runs Ryzen AI packages (see above)")


def _check_linux(report: Report, devices: list[dict[str, Any]], runtime: NpuRuntime) -> None:
    """What AMD's Linux setup asks for, checked when an NPU or an NPU runtime is here."""
    ep = runtime.ep
    if not (devices or (ep is not None and ep.path is not None)):
        return
    settings = doctor_npu.linux_settings(accel=ACCEL)
    report.system["linux"] = settings
    if ep is not None and ep.path is not None:
        folder = str(ep.path.parent)
        on = folder in os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep)
        report.add(
            "LD_LIBRARY_PATH",
            "ok" if on else "warn",
            f"holds {folder}, the EP library's folder"
            if on
            else f"does not hold {folder}, the EP library's folder: ryzenai-llm puts it first for its own workers; "
            f"other programs need `export LD_LIBRARY_PATH={folder}:$LD_LIBRARY_PATH` (AMD's Linux setup step)",
        )
    ini = settings["xrt_ini"]
    if ini["exists"] and ini["num_heap_pages"]:
        report.add("XRT_INI_PATH", "ok", f"{ini['path']} sets num_heap_pages = {ini['num_heap_pages']}")
    else:
        what = (
            f"{ini['path']} does not set num_heap_pages"
            if ini["exists"]
            else (f"{ini['path']} does not exist" if ini["path"] else "is not set")
        )
        report.add(
            "XRT_INI_PATH",
            "warn",
            f"{what}: AMD's Linux setup points it at an xrt.ini with `[Debug]` `num_heap_pages = 8` (large models "
            "need the heap)",
        )
    limit = settings["memlock"]
    report.add(
        "memlock",
        "ok" if limit is None else "warn",
        "unlimited"
        if limit is None
        else f"{limit // 1024} KiB: NPU buffers are locked memory; set `memlock unlimited` for your user in "
        "/etc/security/limits.conf (or `ulimit -l unlimited`) and log in again",
    )
    nodes = settings["accel"]
    if not nodes:
        report.add(
            "NPU device access",
            "fail" if devices else "skip",
            f"no {ACCEL}/accel* node: the amdxdna driver is not loaded (`sudo modprobe amdxdna`, AMD's Linux setup)",
        )
    elif not any(n["access"] for n in nodes):
        names = ", ".join(n["node"] for n in nodes)
        report.add(
            "NPU device access",
            "fail",
            f"{names} cannot be opened by this user: `sudo usermod -aG render $USER`, then log in again",
        )
    else:
        report.add("NPU device access", "ok", ", ".join(n["node"] for n in nodes if n["access"]) + " can be opened")


def _check_windows(report: Report) -> None:
    long_paths, utf8 = windows_path_settings()
    report.system["windows"] = {"long_paths_enabled": long_paths, "utf8_code_page": utf8}
    report.add(
        "Windows paths",
        "ok" if long_paths else "warn",
        f"LongPathsEnabled {'on' if long_paths else 'off'}; ANSI code page {'UTF-8' if utf8 else 'not UTF-8'}"
        + (
            ""
            if long_paths
            else ": package paths over 259 characters (a deep Hugging Face cache) may not open; turn on "
            "LongPathsEnabled, or set HF_HOME=C:\\hf"
        )
        + ("" if utf8 else "; non-ASCII folder names may not open in AMD's native loader"),
    )


def check_system(report: Report) -> None:
    """The machine's checks (no model)."""
    _check_platform(report)
    _check_oga(report)
    _check_ort(report)
    _checkdistributions_named(report)
    runtime = npu_runtime()
    _check_ep(report, runtime)
    _check_release(report, runtime)
    devices, version = npu_devices(report)
    _check_npu(report, devices, runtime)
    _check_driver(report, devices, version)
    _check_verdict(report, devices, runtime)
    if sys.platform.startswith("linux"):
        _check_linux(report, devices, runtime)
    elif sys.platform == "win32":
        _check_windows(report)
