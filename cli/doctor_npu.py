"""What the operating system and AMD's tools say about the NPU, for ``ryzenai-llm doctor``.

Each reader takes what it reads as an argument (a sysfs or ``/proc`` folder, a tool's output,
an environment), so that the tests can hand it stand-in tables; the defaults read this machine:

- the NPU's PCI ids, named by XRT's device map (:func:`npu_devices_linux`, :func:`npu_devices_windows`);
- ``xrt-smi`` (:func:`xrt_smi`): the driver version, the power mode (``examine -r platform``) and the
  hardware contexts with their processes (``examine -r aie-partitions``);
- the NPU driver's minimum per Ryzen AI release (:func:`driver_minimum`);
- AC or battery (:func:`on_ac_power`), a process's peak memory (:func:`peak_memory`) and the NPU
  device nodes it holds open (:func:`accel_files`);
- Linux's settings AMD's Linux setup asks for: ``XRT_INI_PATH``, the memlock limit, access to
  ``/dev/accel`` (:func:`linux_settings`).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = [
    "DRIVER_MINIMUM",
    "XRT_SMI",
    "accel_files",
    "driver_minimum",
    "hardware_contexts",
    "linux_settings",
    "npu_devices_linux",
    "npu_devices_windows",
    "npu_name",
    "on_ac_power",
    "peak_memory",
    "power_mode",
    "version_tuple",
    "windows_power_mode",
    "xrt_driver_version",
    "xrt_smi",
]

#: Where the Ryzen AI installers put ``xrt-smi`` (looked for after ``PATH``).
XRT_SMI = {"win32": Path(r"C:\Windows\System32\AMD\xrt-smi.exe"), "linux": Path("/opt/xilinx/xrt/bin/xrt-smi")}

#: Minimum NPU driver (Windows numbering) per Ryzen AI release, from AMD's application development
#: page (by VitisAI EP version) and AMD's NPU utilities; later releases are held to the newest one
#: published (a newer release may need more: AMD's release notes say which).
DRIVER_MINIMUM = {
    "1.2": "32.0.201.204",
    "1.3": "32.0.203.237",
    "1.4": "32.0.203.257",
    "1.5": "32.0.203.280",
    "1.6": "32.0.203.280",
}

# XRT's device map (vendor 0x1022): id -> (name, NPU generation, runs AMD's LLM packages).
_XDNA1 = ("Phoenix / Hawk Point (PHX/HPT)", "XDNA1", False)
_XDNA3 = ("an XDNA3 NPU", "XDNA3", None)
_STRIX = {0x10: ("Strix Point (STX)", "XDNA2", True), 0x11: ("Strix Halo (STH)", "XDNA2", True)}
_KRACKAN = ("Krackan Point (KRK)", "XDNA2", True)
_DEVICE_IDS = {0x1502, 0x17F0, 0x17F1, 0x17F2, 0x17F3, 0x1B0A, 0x1B0B}


def npu_name(device: int, revision: int) -> tuple[str, str, bool | None]:
    """(name, generation, whether AMD's LLM packages run on it: None when nothing says) of an NPU's PCI id."""
    if device == 0x1502:
        return _XDNA1
    if device == 0x17F0:
        return _KRACKAN if revision == 0x20 else _STRIX.get(revision, ("Strix (STX)", "XDNA2", True))
    return _XDNA3


def _npu(device: int, revision: int, where: str, driver: str | None) -> dict[str, Any]:
    name, family, llm = npu_name(device, revision)
    return {"name": name, "family": family, "device": where, "driver": driver, "runs_llm_packages": llm}


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
        if vendor != 0x1022 or device not in _DEVICE_IDS:
            continue
        driver = os.path.basename(os.readlink(dev / "driver")) if (dev / "driver").is_symlink() else None
        found.append(_npu(device, revision, f"{dev.name} [1022:{device:04x}] rev {revision:02x}", driver))
    return found


def npu_devices_windows(pnputil_output: str, driver_version: str | None = None) -> list[dict[str, Any]]:
    """AMD NPUs in the output of ``pnputil /enum-devices /bus PCI /deviceids`` (what AMD's quicktest reads)."""
    found = {}
    ids = "|".join(f"{d:04X}" for d in sorted(_DEVICE_IDS))
    for m in re.finditer(rf"PCI\\VEN_1022&DEV_({ids})(?:&SUBSYS_[0-9A-F]+)?&REV_([0-9A-F]{{2}})", pnputil_output, re.I):
        key = m.group(0).upper()
        found[key] = _npu(int(m.group(1), 16), int(m.group(2), 16), key, driver_version)
    return list(found.values())


def windows_npus() -> tuple[list[dict[str, Any]], str | None, list[str]]:
    """This Windows machine's NPUs, its NPU driver version (WMI), and notes on what could not be read."""
    notes = []
    try:
        listing = subprocess.run(
            ["pnputil", "/enum-devices", "/bus", "PCI", "/deviceids"], capture_output=True, text=True, timeout=60
        ).stdout
    except (OSError, subprocess.TimeoutExpired) as exc:
        return [], None, [f"pnputil failed ({exc})"]
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
    return npu_devices_windows(listing, f"NPU driver {version}" if version else None), version, notes


# ---------------------------------------------------------------------- xrt-smi
def xrt_smi_path() -> str | None:
    """``xrt-smi`` on ``PATH``, else where the Ryzen AI installer puts it, else None."""
    found = shutil.which("xrt-smi")
    if found:
        return found
    default = XRT_SMI.get("win32" if sys.platform == "win32" else "linux")
    return str(default) if default is not None and default.is_file() else None


def xrt_smi(*args: str) -> str | None:
    """The output of ``xrt-smi ARGS``, or None when it is not there or fails."""
    tool = xrt_smi_path()
    if tool is None:
        return None
    try:
        done = subprocess.run([tool, *args], capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def xrt_driver_version(examine_output: str) -> str | None:
    """The ``NPU Driver Version`` ``xrt-smi examine`` prints, if it does."""
    m = re.search(r"NPU Driver Version\s*:\s*(\S+)", examine_output)
    return m.group(1) if m else None


def power_mode(platform_output: str) -> str | None:
    """The NPU's power mode in ``xrt-smi examine -r platform`` output (``Default``, ``Performance``, ...)."""
    m = re.search(r"(?:Performance|Power) Mode\s*:\s*(\S[^\r\n]*)", platform_output)
    return m.group(1).strip() if m else None


def hardware_contexts(partitions_output: str) -> dict[int, int]:
    """Hardware contexts per process id in ``xrt-smi examine -r aie-partitions`` output."""
    contexts: dict[int, int] = {}
    for m in re.finditer(r"^\s*\|\s*(\d+)\s*\|\s*\d+\s*\|", partitions_output, re.M):
        pid = int(m.group(1))
        contexts[pid] = contexts.get(pid, 0) + 1
    return contexts


def version_tuple(version: str) -> tuple[int, ...] | None:
    """``"32.0.203.280"`` as numbers, or None when it is not dotted numbers."""
    parts = version.strip().split(".")
    return tuple(int(p) for p in parts) if all(p.isdigit() for p in parts) and len(parts) > 1 else None


def driver_minimum(release: str | None) -> tuple[str, str] | None:
    """(minimum driver version, where the number comes from) for a Ryzen AI release, or None when unknown."""
    if release is None:
        return None
    line = ".".join(release.split(".")[:2])
    if line in DRIVER_MINIMUM:
        return DRIVER_MINIMUM[line], f"Ryzen AI {line}'s minimum"
    newest = max(DRIVER_MINIMUM, key=lambda r: tuple(int(p) for p in r.split(".")))
    if tuple(int(p) for p in line.split(".")) > tuple(int(p) for p in newest.split(".")):
        return DRIVER_MINIMUM[newest], f"the newest minimum AMD published (Ryzen AI {newest}'s; {line} may need more)"
    return None


# ---------------------------------------------------------------------- power, memory, device files
def on_ac_power(supplies: Path = Path("/sys/class/power_supply")) -> bool | None:
    """True on AC power, False on battery, None when unknown (Linux: sysfs; Windows: the system power status)."""
    if sys.platform == "win32":  # pragma: no cover - Windows only
        import ctypes

        class _Status(ctypes.Structure):
            _fields_ = [
                ("ACLineStatus", ctypes.c_ubyte),
                ("BatteryFlag", ctypes.c_ubyte),
                ("BatteryLifePercent", ctypes.c_ubyte),
                ("SystemStatusFlag", ctypes.c_ubyte),
                ("BatteryLifeTime", ctypes.c_ulong),
                ("BatteryFullLifeTime", ctypes.c_ulong),
            ]

        status = _Status()
        if not ctypes.windll.kernel32.GetSystemPowerStatus(ctypes.byref(status)):
            return None
        return {0: False, 1: True}.get(status.ACLineStatus)
    mains, batteries = [], 0
    for supply in sorted(supplies.glob("*")) if supplies.is_dir() else []:
        try:
            kind = (supply / "type").read_text().strip()
            online = (supply / "online").read_text().strip() if (supply / "online").is_file() else None
        except OSError:
            continue
        if kind == "Mains":
            mains.append(online == "1")
        elif kind == "Battery":
            batteries += 1
    if mains:
        return any(mains)
    return None if not batteries else False


#: Windows power mode overlays (the "Power mode" of Settings > System > Power & battery).
_OVERLAYS = {
    "961cc777-2547-4f9d-8174-7d86181b8a7a": "Best power efficiency",
    "00000000-0000-0000-0000-000000000000": "Balanced",
    "ded574b5-45a0-4f42-8737-46345c09c238": "Best performance",
}


def windows_power_mode() -> str | None:  # pragma: no cover - Windows only
    """Windows' power mode (Settings > Power & battery), or None when it cannot be read."""
    if sys.platform != "win32":
        return None
    try:
        import ctypes
        import uuid

        guid = (ctypes.c_ubyte * 16)()
        if ctypes.windll.powrprof.PowerGetEffectiveOverlayScheme(ctypes.byref(guid)) != 0:
            return None
        return _OVERLAYS.get(str(uuid.UUID(bytes_le=bytes(guid))), "a custom power mode")
    except (AttributeError, OSError):
        return None


def peak_memory(pid: int, proc: Path = Path("/proc")) -> int | None:
    """A process's peak resident memory in bytes (Linux ``VmHWM``; Windows the peak working set), or None."""
    if sys.platform == "win32":  # pragma: no cover - Windows only
        return _windows_peak(pid)
    try:
        status = (proc / str(pid) / "status").read_text()
    except OSError:
        return None
    m = re.search(r"^VmHWM:\s*(\d+)\s*kB", status, re.M)
    return int(m.group(1)) * 1024 if m else None


def _windows_peak(pid: int) -> int | None:  # pragma: no cover - Windows only
    import ctypes
    from ctypes import wintypes

    class _Counters(ctypes.Structure):
        _fields_ = [("cb", wintypes.DWORD), ("PageFaultCount", wintypes.DWORD)] + [
            (name, ctypes.c_size_t)
            for name in (
                "PeakWorkingSetSize",
                "WorkingSetSize",
                "QuotaPeakPagedPoolUsage",
                "QuotaPagedPoolUsage",
                "QuotaPeakNonPagedPoolUsage",
                "QuotaNonPagedPoolUsage",
                "PagefileUsage",
                "PeakPagefileUsage",
            )
        ]

    kernel = ctypes.windll.kernel32  # type: ignore[attr-defined]
    handle = kernel.OpenProcess(0x1000 | 0x0010, False, pid)  # QUERY_LIMITED_INFORMATION | VM_READ
    if not handle:
        return None
    try:
        counters = _Counters()
        counters.cb = ctypes.sizeof(counters)
        if not kernel.K32GetProcessMemoryInfo(handle, ctypes.byref(counters), counters.cb):
            return None
        return int(counters.PeakWorkingSetSize)
    finally:
        kernel.CloseHandle(handle)


def accel_files(pid: int, proc: Path = Path("/proc")) -> list[str]:
    """The ``/dev/accel/*`` device nodes process ``pid`` holds open (Linux), from ``/proc/<pid>/fd``."""
    found = set()
    fds = proc / str(pid) / "fd"
    try:
        entries = list(fds.iterdir())
    except OSError:
        return []
    for fd in entries:
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("/dev/accel/"):
            found.add(target)
    return sorted(found)


# ---------------------------------------------------------------------- Linux settings
def linux_settings(
    environ: Mapping[str, str] | None = None, *, accel: Path = Path("/dev/accel"), memlock: int | None = None
) -> dict[str, Any]:
    """What AMD's Linux setup asks for, as this process has it.

    ``xrt_ini``: ``XRT_INI_PATH`` and whether its file sets ``num_heap_pages``; ``memlock``: the
    locked-memory limit in bytes (None: unlimited); ``accel``: each ``/dev/accel/accel*`` node and
    whether this user may open it.
    """
    environ = os.environ if environ is None else environ
    ini = environ.get("XRT_INI_PATH", "")
    heap = None
    if ini and Path(ini).is_file():
        m = re.search(r"num_heap_pages\s*=\s*(\d+)", Path(ini).read_text(encoding="utf-8", errors="replace"))
        heap = int(m.group(1)) if m else None
    if memlock is None:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_MEMLOCK)[0]
        limit = None if soft == resource.RLIM_INFINITY else int(soft)
    else:
        limit = None if memlock < 0 else memlock
    nodes = sorted(accel.glob("accel*")) if accel.is_dir() else []
    return {
        "xrt_ini": {"path": ini or None, "exists": bool(ini) and Path(ini).is_file(), "num_heap_pages": heap},
        "memlock": limit,
        "accel": [{"node": str(n), "access": os.access(n, os.R_OK | os.W_OK)} for n in nodes],
    }
