"""``ryzenai-llm doctor [MODEL] [--json]``: will this run, and is it on the NPU?

Without a model it reports the machine: the onnxruntime-genai and onnxruntime builds and
versions (each imported in a child process, so that a build that cannot load is reported
rather than fatal, and the two runtimes never share this process), the Ryzen AI release they
mean, where onnxruntime-genai will find the Ryzen AI EP library (or why it will not), and
whether an AMD NPU and its driver are visible, as AMD's own tools tell: the PCI device
(``1022:17F0`` Strix/Krackan, ``1022:1502`` Phoenix/Hawk Point), the driver bound to it, and
``xrt-smi``.

With a model it reports the package (facts, Git LFS pointers, missing files, path hazards,
chat format, release), loads it the way an application does (in a worker process), runs a
short greedy generation and says which execution provider ran it, with the load time, time
to first token and tokens/s; compares a warm (KV reuse) answer with a cold one when reuse is
on; sends a prompt longer than the EP's run length on packages that have one (16K); and for
an embedding folder, times the first vector of each run shape.

Every check is ``ok``, ``warn``, ``fail`` or ``skip`` (it cannot be checked here, and the
detail says why); the command exits 1 when a check fails. ``--json`` prints
``{"checks": [{"name", "status", "detail"}], "system": {...}, "measurements": {...}}``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ryzenai_core.errors import RyzenAIError
from ryzenai_core.package.runtime import (
    ENV_RELEASE,
    EpSearch,
    env_release,
    find_ryzenai_ep,
    parse_release,
    runtime_info,
)

__all__ = ["Check", "Report", "add_parser", "npu_devices_linux", "npu_devices_windows", "run"]

Status = Literal["ok", "warn", "fail", "skip"]

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
_PROMPT = "Say hello in one short sentence."
_REUSE_SYSTEM = (
    "You are a friendly assistant on a laptop. Answer in one short sentence, in plain words, without lists, "
    "code or markup. If a question is unclear, say so briefly. Greet the user warmly, thank them when they "
    "thank you, and say goodbye when they leave. Never repeat the question back to the user."
)


@dataclass
class Check:
    """One line of the report."""

    name: str
    status: Status
    detail: str

    def to_dict(self) -> dict[str, str]:
        """The JSON form: ``{"name", "status", "detail"}``."""
        return {"name": self.name, "status": self.status, "detail": self.detail}


@dataclass
class Report:
    """What ``doctor`` found: the checks in order, facts about the machine, and measurements."""

    checks: list[Check] = field(default_factory=list)
    system: dict[str, Any] = field(default_factory=dict)
    measurements: dict[str, Any] = field(default_factory=dict)

    def add(self, name: str, status: Status, detail: str) -> Check:
        """Append a check."""
        check = Check(name, status, detail)
        self.checks.append(check)
        return check

    @property
    def failed(self) -> bool:
        """Whether a check failed."""
        return any(c.status == "fail" for c in self.checks)

    def to_dict(self) -> dict[str, Any]:
        """The JSON form."""
        return {
            "checks": [c.to_dict() for c in self.checks],
            "system": self.system,
            "measurements": self.measurements,
        }


# ---------------------------------------------------------------------- the machine
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


# ---------------------------------------------------------------------- a model
def check_model(report: Report, model: str, *, provider: str | None, kv_reuse: bool, new_tokens: int) -> None:
    """The checks of one model: an LLM package or an embedding folder."""
    from ryzenai_core.embeddings.package import is_embedding_folder
    from ryzenai_core.package.hub import resolve_model

    try:
        path = resolve_model(model)
    except RyzenAIError as exc:
        report.add("package", "fail", str(exc))
        return
    if is_embedding_folder(path):
        _check_embedding(report, path)
    else:
        _check_llm(report, path, provider=provider, kv_reuse=kv_reuse, new_tokens=new_tokens)


def _check_llm(report: Report, path: Path, *, provider: str | None, kv_reuse: bool, new_tokens: int) -> None:
    from ryzenai_core.package.folder import ModelPackage
    from ryzenai_core.prompt.templates import ChatTemplate

    try:
        pkg = ModelPackage.open(path)
        budget = pkg.budget
    except RyzenAIError as exc:
        report.add("package", "fail", str(exc))
        return
    release = f"release {pkg.release} (from {pkg.release_source})" if pkg.release else "release unknown"
    report.add(
        "package",
        "ok",
        f"{pkg.name} ({pkg.path}): {pkg.model_type}, {pkg.mode.value}, {pkg.provider} provider, {release}; "
        f"window {budget.window}, prompt limit {budget.prompt_limit}"
        + (f", {budget.prefill_window} tokens per prefill run" if budget.prefill_window else ""),
    )
    loadable = _check_files(report, pkg)
    warnings = pkg.path_warnings
    if warnings:
        report.add("package path", "warn", " ".join(warnings))
    elif sys.platform == "win32":
        length = len(str(pkg.path / pkg.longest_file)) if pkg.longest_file else len(str(pkg.path))
        report.add("package path", "ok", f"ASCII, longest file path {length} characters")
    else:
        report.add("package path", "ok", "no path limits here (non-ASCII and long paths matter on Windows only)")
    try:
        template = ChatTemplate.for_package(pkg)
    except RyzenAIError as exc:
        report.add("chat format", "fail", str(exc))
    else:
        note = template.format_message or template.fallback_message
        report.add("chat format", "warn" if note else "ok", note or f"{template.family} ({template.source_name})")
    _check_built_for(report, pkg)
    if loadable:
        _run_llm(report, pkg, provider=provider, kv_reuse=kv_reuse, new_tokens=new_tokens)


def _check_files(report: Report, pkg: Any) -> bool:
    """The package-files check; whether loading is worth trying."""
    try:
        pkg.check_loadable()
    except RyzenAIError as exc:
        report.add("package files", "fail", str(exc))
        return False
    cache = [m for m in pkg.missing_files if m.startswith(("cache/", ".cache/"))]
    if cache:
        report.add("package files", "fail", f"missing {', '.join(pkg.missing_files)}: download the package again")
    elif pkg.missing_files:
        report.add(
            "package files",
            "warn",
            f"missing {', '.join(pkg.missing_files)}: AMD's loader compiles it at the first load, into the package "
            "folder (slow); download the package again to avoid that",
        )
    else:
        report.add(
            "package files", "ok", "every file the configs and the NPU file names imply is there, none an LFS pointer"
        )
    return True


def _check_built_for(report: Report, pkg: Any) -> None:
    info = runtime_info()
    if not pkg.is_ryzenai:
        return
    if not (info.ryzenai and info.release and pkg.built_for):
        why = "no Ryzen AI build installed" if not info.ryzenai else "a release is unknown"
        report.add("release match", "skip", f"built for {pkg.built_for or 'an unknown release'}; {why}")
        return
    built, runs = parse_release(pkg.built_for)[:2], parse_release(info.release)[:2]
    if built > runs:
        report.add(
            "release match",
            "fail",
            f"built for Ryzen AI {pkg.built_for}, newer than the installed {info.release}: activate the Ryzen AI "
            f"{pkg.built_for} environment, or use the package built for {info.release}",
        )
    elif built < runs:
        report.add(
            "release match",
            "warn",
            f"built for Ryzen AI {pkg.built_for}, older than the installed {info.release}; AMD ships packages for "
            "each release: prefer the one built for yours",
        )
    else:
        report.add("release match", "ok", f"built for {pkg.built_for}, runs on {info.release}")


def _ms(seconds: float | None) -> str:
    return f"{1000 * seconds:.0f} ms" if seconds is not None else "-"


def _run_llm(report: Report, pkg: Any, *, provider: str | None, kv_reuse: bool, new_tokens: int) -> None:
    from ryzenai_core.engine.engine import Engine
    from ryzenai_core.messages import ChatMessage, RawPrompt
    from ryzenai_core.options import validated_options

    info = runtime_info()
    if pkg.is_ryzenai and provider is None and not info.ryzenai:
        report.add(
            "NPU load",
            "skip",
            f"{pkg.name} needs AMD's Ryzen AI build of onnxruntime-genai to run on the NPU; found {info.describe()}. "
            "Its plain ONNX weights are run on the CPU (provider='cpu') for the checks below",
        )
        provider = "cpu"
    engine = Engine.get(pkg.path, provider=provider)
    where = f"provider={provider!r}" if provider else "the package's provider"
    try:
        try:
            seconds = engine.load()
        except RyzenAIError as exc:
            report.add("load", "fail", f"{where}: {exc}")
            return
        report.measurements["load_seconds"] = seconds
        report.add("load", "ok", f"{pkg.name} loaded in {seconds:.2f} s ({where}, in a worker process)")

        # With --kv-reuse every call keeps its generator, so that the second turn can continue the first.
        greedy = validated_options(max_new_tokens=new_tokens, temperature=0, **({"kv_reuse": True} if kv_reuse else {}))
        c = engine.generate([ChatMessage("user", _PROMPT)], greedy)
        t = c.timings
        ttft = t.time_to_first_token - t.queued if t and t.time_to_first_token is not None else None
        rate = t.decode_tokens_per_second if t else None
        report.measurements.update(
            {
                "provider": c.provider,
                "ttft_seconds": ttft,
                "decode_tokens_per_second": rate,
                "prompt_tokens": c.usage.prompt_tokens if c.usage else None,
            }
        )
        on_npu = c.provider == "RyzenAI"
        status: Status = "ok" if on_npu or not pkg.is_ryzenai else "warn"
        speed = f"{rate:.1f} tokens/s" if rate else "- tokens/s"
        report.add(
            "generation",
            status,
            f"ran on {c.provider}"
            + ("" if on_npu or not pkg.is_ryzenai else " (not the NPU)")
            + f": {c.usage.completion_tokens if c.usage else 0} tokens, time to first token {_ms(ttft)}, {speed}",
        )
        _check_reuse(report, engine, greedy)
        _check_long_prompt(report, engine, pkg, RawPrompt)
    except RyzenAIError as exc:
        report.add("generation", "fail", str(exc))
    finally:
        engine.close()


def _check_reuse(report: Report, engine: Any, greedy: Any) -> None:
    from ryzenai_core.messages import ChatMessage
    from ryzenai_core.options import validated_options

    # A conversation long enough to keep: the engine keeps whole multiples of 64 prompt tokens.
    opening = [ChatMessage("system", _REUSE_SYSTEM), ChatMessage("user", _PROMPT)]
    first = engine.generate(opening, greedy)
    turns = [*opening, ChatMessage("assistant", first.text), ChatMessage("user", "Now say goodbye.")]
    warm = engine.generate(turns, greedy)
    reused = warm.timings.reused_prompt_tokens if warm.timings else 0
    if not reused:
        report.add(
            "KV reuse",
            "skip",
            "off for this package (the default on Ryzen AI packages, whose runtime support is unverified); "
            "`--kv-reuse` turns it on to compare a warm answer with a cold one",
        )
        return
    cold = engine.generate(
        turns, validated_options(max_new_tokens=greedy.max_new_tokens, temperature=0, kv_reuse=False)
    )
    same = warm.token_ids == cold.token_ids
    report.measurements["reused_prompt_tokens"] = reused
    report.add(
        "KV reuse",
        "ok" if same else "fail",
        f"a second turn reused {reused} of {warm.usage.prompt_tokens if warm.usage else '?'} prompt tokens; "
        + (
            "its greedy answer equals a cold run's"
            if same
            else "its greedy answer differs from a cold run's: pass kv_reuse=False"
        ),
    )


def _filler_ids(engine: Any, n: int) -> list[int]:
    text = "The NPU runs precompiled fixed shapes, and long prompts are fed in runs. "
    ids: list[int] = []
    while len(ids) < n:
        text += text
        ids = engine.encode(text)
    return list(ids[:n])


def _check_long_prompt(report: Report, engine: Any, pkg: Any, raw_prompt: Callable[..., Any]) -> None:
    from ryzenai_core.options import validated_options

    budget = pkg.budget
    run = budget.prefill_window
    if not run or budget.prompt_limit <= run + 16:
        report.add("long prompt", "skip", "the package has no run length shorter than its prompt limit")
        return
    n = min(run + 512, budget.prompt_limit - 8)
    c = engine.generate(
        raw_prompt(token_ids=_filler_ids(engine, n)), validated_options(max_new_tokens=4, temperature=0)
    )
    windows = c.plan.prefill_windows if c.plan else 1
    t = c.timings
    report.measurements["long_prompt"] = {
        "prompt_tokens": n,
        "prefill_runs": windows,
        "ttft_seconds": t.time_to_first_token if t else None,
    }
    report.add(
        "long prompt",
        "ok",
        f"{n} tokens (over the {run}-token run length) in {windows} prefill run(s) on {c.provider}, "
        f"time to first token {_ms(t.time_to_first_token if t else None)}",
    )


def _check_embedding(report: Report, path: Path) -> None:
    from ryzenai_core.embeddings.embedding import EmbeddingEngine

    try:
        engine = EmbeddingEngine(path)
    except RyzenAIError as exc:
        report.add("embedding model", "fail", str(exc))
        return
    facts = engine.describe()
    report.add(
        "embedding model",
        "ok",
        f"{facts['name']} ({facts['path']}): {facts['dims']} dims, {facts['pooling']} pooling, max length "
        f"{facts['max_length']}, runs on {facts['provider']} with {facts['run_shapes']} shapes",
    )
    shapes: list[int | None] = [*engine.buckets] or [None]
    times = {}
    try:
        for bucket in shapes:
            text = _text_of(engine, (bucket or 16) - 2)
            start = time.perf_counter()
            result = engine.embed([text])
            times[str(result.shapes[0][1]) if bucket else "dynamic"] = time.perf_counter() - start
    except RyzenAIError as exc:
        report.add("first vector", "fail", str(exc))
        return
    finally:
        engine.close()
    report.measurements["first_vector_seconds"] = times
    on_npu = facts["provider"] == "VitisAIExecutionProvider"
    report.add(
        "first vector",
        "ok" if on_npu else "warn",
        ", ".join(f"{shape}: {_ms(s)}" for shape, s in times.items())
        + f" on {facts['provider']}"
        + ("" if on_npu else " (not the NPU: onnxruntime has no VitisAIExecutionProvider)")
        + (" (the first run of each shape compiles it on the NPU)" if on_npu else ""),
    )


def _text_of(engine: Any, tokens: int) -> str:
    """A text of about ``tokens`` tokens (special tokens included), at most that many."""
    words: list[str] = []
    for word in _words():
        words.append(word)
        if engine.count_tokens([" ".join(words)])[0] > tokens:
            words.pop()
            break
    return " ".join(words) or "a"


def _words() -> Iterator[str]:
    i = 0
    while True:
        yield ("npu", "bucket", "shape", "vector", "token", "model")[i % 6]
        i += 1


# ---------------------------------------------------------------------- the command
def run(model: str | None, *, provider: str | None = None, kv_reuse: bool = False, new_tokens: int = 16) -> Report:
    """Every check, in order: the machine, then ``model`` when given."""
    report = Report()
    check_system(report)
    if model is not None:
        check_model(report, model, provider=provider, kv_reuse=kv_reuse, new_tokens=new_tokens)
    return report


_STYLE = {"ok": "green", "warn": "yellow", "fail": "bold red", "skip": "dim"}


def _doctor(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    console = Console(stderr=args.json)
    with console.status("checking (a first load on an NPU compiles for a while)"):
        report = run(args.model, provider=args.provider, kv_reuse=args.kv_reuse, new_tokens=args.max_new_tokens)
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
        return 1 if report.failed else 0
    table = Table(title="ryzenai-llm doctor", show_lines=False)
    table.add_column("check", no_wrap=True)
    table.add_column("status", no_wrap=True)
    table.add_column("detail", overflow="fold")
    for c in report.checks:
        table.add_row(c.name, f"[{_STYLE[c.status]}]{c.status}[/]", c.detail)
    console.print(table)
    counts = {s: sum(c.status == s for c in report.checks) for s in _STYLE}
    console.print(", ".join(f"{n} {s}" for s, n in counts.items()))
    return 1 if report.failed else 0


def add_parser(sub: Any) -> None:
    """Register ``doctor`` on the CLI's subparsers."""
    p = sub.add_parser("doctor", help="check this machine (and a model): will it run, and is it on the NPU?")
    p.add_argument("model", nargs="?", help="a package or embedding folder, embedded model or Hugging Face repo id")
    p.add_argument("--provider", choices=["cpu", "cuda", "dml"], help="run the model on this provider instead")
    p.add_argument("--kv-reuse", action="store_true", help="turn KV reuse on to compare a warm answer with a cold one")
    p.add_argument("--max-new-tokens", type=int, default=16, help="tokens of the test generation (default 16)")
    p.add_argument("--json", action="store_true", help='print {"checks": [{"name", "status", "detail"}], ...}')
    p.set_defaults(func=_doctor)
