"""Which onnxruntime-genai (OGA) is installed, and which Ryzen AI release that means.

Every OGA wheel (CPU, CUDA, DirectML, the Ryzen AI build) installs the same import name
``onnxruntime_genai``, so the distribution name tells them apart. Nothing here imports
OGA until :func:`import_oga` is called.

A ``RyzenAI`` package runs on AMD's execution provider library, which onnxruntime-genai
(0.12 and later) looks up when it loads such a package: :func:`find_ryzenai_ep` repeats that
search, :func:`prepare_ryzenai_runtime` does before loading what AMD's own tools do (on
Windows, the ``onnxruntime_genai`` folder on the DLL search path), and
:func:`explain_ryzenai_failure` turns the runtime's failure texts into their cause and fix.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import re
import sys
from collections.abc import MutableMapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from types import ModuleType
from typing import Any

from ..errors import InvalidRequestError, RuntimeNotAvailableError

__all__ = [
    "ENV_EP_PATH",
    "ENV_RELEASE",
    "EpSearch",
    "RuntimeInfo",
    "explain_ryzenai_failure",
    "find_ryzenai_ep",
    "import_oga",
    "parse_release",
    "prepare_ryzenai_runtime",
    "release_for_oga_version",
    "runtime_info",
]

#: Environment variable that overrides the Ryzen AI release a package is run with.
ENV_RELEASE = "RYZENAI_VERSION"
#: Environment variable onnxruntime-genai reads first for the Ryzen AI EP library: its full path.
ENV_EP_PATH = "RYZENAI_EP_PATH"

#: The Ryzen AI EP library's file name, as onnxruntime-genai 0.12-0.15 looks for it.
EP_FILENAME = {True: "onnxruntime_providers_ryzenai.dll", False: "libonnxruntime_providers_ryzenai.so"}
#: DLLs AMD's tools expect beside onnxruntime-genai before they load an NPU package on Windows.
WINDOWS_DLLS = ("libutf8_validity.dll", "abseil_dll.dll")

# OGA version shipped by each Ryzen AI release (see the project's docs/OGA notes).
_OGA_TO_RELEASE: dict[tuple[int, int], str] = {
    (0, 7): "1.5",
    (0, 9): "1.6",
    (0, 11): "1.7",
    (0, 14): "1.8",
}

_OGA_DISTRIBUTIONS = (
    "onnxruntime-genai-directml-ryzenai",
    "onnxruntime-genai-ryzenai",
    "onnxruntime-genai",
    "onnxruntime-genai-cuda",
    "onnxruntime-genai-directml",
    "onnxruntime-genai-winml",
)

_RELEASE_RE = re.compile(r"^\d+\.\d+(\.\d+)?$")


def parse_release(text: str) -> tuple[int, int, int | None]:
    """Parse a Ryzen AI release such as ``"1.8.0"`` or ``"1.7"``.

    A release without a patch number (``"1.7"``) stands for the whole 1.7 line.

    Raises:
        InvalidRequestError: the text is not a release number.
    """
    text = text.strip()
    if not _RELEASE_RE.match(text):
        raise InvalidRequestError(
            f"Ryzen AI release {text!r} is not a version like '1.8.0' or '1.7'. "
            f"Fix the value (for example in the {ENV_RELEASE} environment variable)."
        )
    parts = [int(p) for p in text.split(".")]
    return parts[0], parts[1], (parts[2] if len(parts) == 3 else None)


def release_for_oga_version(version: str) -> str | None:
    """The Ryzen AI release whose runtime ships this OGA version, or None."""
    m = re.match(r"(\d+)\.(\d+)", version)
    if not m:
        return None
    return _OGA_TO_RELEASE.get((int(m.group(1)), int(m.group(2))))


@dataclass(frozen=True)
class RuntimeInfo:
    """The installed onnxruntime-genai, read from package metadata (OGA is not imported).

    Attributes:
        distribution: the pip distribution that provides ``onnxruntime_genai``, or None.
        version: its version, or None when none is installed.
        ryzenai: True for AMD's Ryzen AI build.
        release: the Ryzen AI release that build belongs to, when known.
    """

    distribution: str | None
    version: str | None
    ryzenai: bool
    release: str | None

    @property
    def installed(self) -> bool:
        """Whether any onnxruntime-genai distribution is installed."""
        return self.distribution is not None

    def describe(self) -> str:
        """One line for error messages."""
        if not self.installed:
            return "no onnxruntime-genai installed"
        kind = f"Ryzen AI build (release {self.release or 'unknown'})" if self.ryzenai else "not a Ryzen AI build"
        return f"{self.distribution} {self.version}, {kind}"


def _metadata() -> ModuleType:
    """importlib.metadata, imported when a runtime is first described (importing this module needs none of it)."""
    import importlib.metadata

    return importlib.metadata


@lru_cache(maxsize=1)
def runtime_info() -> RuntimeInfo:
    """Describe the installed onnxruntime-genai without importing it."""
    md = _metadata()
    for dist in _OGA_DISTRIBUTIONS:
        try:
            version = md.version(dist)
        except md.PackageNotFoundError:
            continue
        ryzenai = "ryzenai" in dist
        release = release_for_oga_version(version) if ryzenai else None
        return RuntimeInfo(dist, version, ryzenai, release)
    # A build installed some other way (a wheel with an unusual name, a source build).
    for found in md.distributions():
        name = (found.metadata["Name"] or "").lower()
        if name.startswith("onnxruntime") and "genai" in name:
            ryzenai = "ryzenai" in name
            release = release_for_oga_version(found.version) if ryzenai else None
            return RuntimeInfo(name, found.version, ryzenai, release)
    return RuntimeInfo(None, None, False, None)


_oga: ModuleType | None = None


def import_oga() -> ModuleType:
    """Import ``onnxruntime_genai`` or explain how to get it.

    Raises:
        RuntimeNotAvailableError: no OGA build can be imported.
    """
    global _oga
    if _oga is not None:
        return _oga
    try:
        _oga = importlib.import_module("onnxruntime_genai")
    except ImportError as exc:  # pragma: no cover - depends on the environment
        info = runtime_info()
        found = f" Found {info.describe()}, but importing it failed: {exc}." if info.installed else ""
        raise RuntimeNotAvailableError(
            "onnxruntime-genai is not importable." + found + " On a Ryzen AI PC, activate the "
            "conda environment the Ryzen AI installer created (e.g. `conda activate "
            "ryzen-ai-1.8.0`); elsewhere install the CPU build with "
            "`pip install 'ryzenai-llm[cpu]'`. Never install both in one environment."
        ) from exc
    return _oga


def env_release() -> str | None:
    """The release named by the ``RYZENAI_VERSION`` environment variable, validated."""
    value = os.environ.get(ENV_RELEASE, "").strip()
    if not value:
        return None
    parse_release(value)
    return value


# ---------------------------------------------------------------------- the Ryzen AI EP library
def _package_dir(name: str) -> Path | None:
    """The folder of an installed package, found without importing it."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    return Path(locations[0]) if locations else None


@dataclass(frozen=True)
class EpSearch:
    """Where onnxruntime-genai looks for the Ryzen AI EP library, in its order, and what it finds.

    Attributes:
        filename: the library's file name on this platform.
        path: the library the runtime will load, or None when the search finds none.
        source: where ``path`` came from (``RYZENAI_EP_PATH``, ``next to onnxruntime-genai``, ...).
        searched: every (place, path) looked at, in order.
        problem: why no library is found, with the fix; None when one is.
        missing_dlls: on Windows, the DLLs AMD's tools expect beside onnxruntime-genai that are not there.
    """

    filename: str
    path: Path | None
    source: str | None
    searched: tuple[tuple[str, Path], ...]
    problem: str | None = None
    missing_dlls: tuple[str, ...] = ()

    @property
    def found(self) -> bool:
        """Whether the runtime will find a library file."""
        return self.path is not None

    def describe(self) -> str:
        """One line: where it was found (and how), or why not."""
        if self.path is not None:
            return f"{self.path} ({self.source})"
        return str(self.problem)


def find_ryzenai_ep(
    *,
    windows: bool | None = None,
    environ: MutableMapping[str, str] | None = None,
    genai_dir: Path | None = None,
    ort_dir: Path | None = None,
    exe_dir: Path | None = None,
    cwd: Path | None = None,
) -> EpSearch:
    """Repeat onnxruntime-genai's search for the Ryzen AI EP library (``src/ryzenai/interface.cpp``).

    In order: the file ``RYZENAI_EP_PATH`` names (used as it is, even when it does not
    exist); on Windows only, the library next to onnxruntime-genai's DLL, next to onnxruntime's
    DLL and next to the executable; last, the current working folder. Linux looks only at
    ``RYZENAI_EP_PATH`` and the working folder.

    Every argument defaults to this process (the platform, ``os.environ``, the installed
    ``onnxruntime_genai`` and ``onnxruntime/capi`` folders, ``sys.executable``'s folder, the
    working folder); tests pass their own.
    """
    windows = sys.platform == "win32" if windows is None else windows
    environ = os.environ if environ is None else environ
    if genai_dir is None:
        genai_dir = _package_dir("onnxruntime_genai")
    if ort_dir is None:
        ort = _package_dir("onnxruntime")
        ort_dir = ort / "capi" if ort is not None else None
    exe_dir = Path(sys.executable).parent if exe_dir is None else exe_dir
    cwd = Path.cwd() if cwd is None else cwd
    name = EP_FILENAME[windows]
    missing = tuple(d for d in WINDOWS_DLLS if windows and genai_dir is not None and not (genai_dir / d).is_file())

    named = environ.get(ENV_EP_PATH, "")
    if named:
        path = Path(named)
        searched = ((ENV_EP_PATH, path),)
        if path.is_file():
            return EpSearch(name, path, ENV_EP_PATH, searched, missing_dlls=missing)
        if path.is_dir():
            hint = f" ({path / name} is there: set it to that)" if (path / name).is_file() else ""
            problem = f"{ENV_EP_PATH} is {path}, a folder; it must name the library file itself{hint}"
        else:
            problem = f"{ENV_EP_PATH} is {path}, which does not exist; set it to the full path of {name}"
        return EpSearch(name, None, None, searched, problem, missing)

    places: list[tuple[str, Path]] = []
    if windows:
        for place, folder in (
            ("next to onnxruntime-genai", genai_dir),
            ("next to onnxruntime", ort_dir),
            ("next to the executable", exe_dir),
        ):
            if folder is not None:
                places.append((place, folder / name))
    places.append(("in the working folder", cwd / name))
    for place, path in places:
        if path.is_file():
            return EpSearch(name, path, place, tuple(places), missing_dlls=missing)
    if windows:
        where = ", ".join(f"{place} ({path.parent})" for place, path in places)
        problem = (
            f"{name} is not found ({ENV_EP_PATH} is unset; looked {where}): run in the environment the Ryzen AI "
            f"installer created (e.g. `conda activate ryzen-ai-1.8.0`), or set {ENV_EP_PATH} to the library's full path"
        )
    else:
        elsewhere = [
            folder / name
            for folder in (genai_dir, ort_dir, _env_path("RYZEN_AI_INSTALLATION_PATH", environ))
            if folder is not None and (folder / name).is_file()
        ]
        hint = f" It is at {elsewhere[0]}: `export {ENV_EP_PATH}={elsewhere[0]}`." if elsewhere else ""
        problem = (
            f"{name} is not found: {ENV_EP_PATH} is unset, and on Linux onnxruntime-genai looks only there and "
            f"in the working folder ({cwd}). Set {ENV_EP_PATH} to the library's full path in your Ryzen AI "
            f"installation.{hint}"
        )
    return EpSearch(name, None, None, tuple(places), problem, missing)


def _env_path(name: str, environ: MutableMapping[str, str]) -> Path | None:
    value = environ.get(name, "")
    return Path(value) if value else None


_DLL_DIRECTORIES: dict[str, Any] = {}  # folder -> os.add_dll_directory handle, kept for the process's life


def prepare_ryzenai_runtime(
    *, windows: bool | None = None, environ: MutableMapping[str, str] | None = None
) -> EpSearch:
    """Before loading a Ryzen AI package: what AMD's tools do, then where the EP library is.

    On Windows, Lemonade puts the ``onnxruntime_genai`` package folder (where the Ryzen AI
    build keeps the EP's DLLs) first on ``PATH`` and adds it with ``os.add_dll_directory``;
    both are per process (a child does not inherit a DLL directory), so the process that loads
    the model calls this. Linux needs nothing beyond :func:`find_ryzenai_ep`.
    """
    windows = sys.platform == "win32" if windows is None else windows
    environ = os.environ if environ is None else environ
    genai = _package_dir("onnxruntime_genai")
    if windows and genai is not None:
        folder = str(genai)
        add = getattr(os, "add_dll_directory", None)
        if add is not None and folder not in _DLL_DIRECTORIES:
            _DLL_DIRECTORIES[folder] = add(folder)
        path = environ.get("PATH", "")
        if folder not in path.split(os.pathsep):
            environ["PATH"] = folder + (os.pathsep + path if path else "")
    return find_ryzenai_ep(windows=windows, environ=environ, genai_dir=genai)


_ENV_HINT = "run in the environment the Ryzen AI installer created (e.g. `conda activate ryzen-ai-1.8.0`)"


def explain_ryzenai_failure(text: str, ep: EpSearch | None = None) -> str | None:
    """The cause and fix of a Ryzen AI load failure, from the runtime's own text; None when not one.

    Args:
        text: the runtime's error message.
        ep: where the EP library was looked for before the load (see :func:`prepare_ryzenai_runtime`).
    """
    low = text.lower()
    if "no ryzenai devices detected" in low:
        return (
            "the Ryzen AI execution provider loaded but sees no NPU device: the NPU driver is not installed or not "
            "running, or this PC has no Ryzen AI NPU the provider supports. Check that Windows' Device Manager lists "
            "'NPU Compute Accelerator Device' under Neural processors (on Linux: `xrt-smi examine` lists the NPU), "
            "install AMD's NPU driver for your Ryzen AI release, and see `ryzenai-llm doctor`"
        )
    if "unknown provider name" in low:
        return (
            "this onnxruntime-genai build has no RyzenAI execution provider (a public build, not AMD's Ryzen AI "
            f"build): {_ENV_HINT}, or install AMD's build of onnxruntime-genai"
        )
    cannot_load = (
        "loadlibrary" in low
        or "failed to load library" in low
        or "cannot open shared object" in low
        or "failed to register ryzenai execution provider library" in low
    )
    if not cannot_load:
        return None
    if ep is not None and not ep.found:
        return f"the Ryzen AI EP library cannot be loaded: {ep.problem}"
    where = f" ({ep.path}, {ep.source})" if ep is not None and ep.path is not None else ""
    dlls = (
        f"; {', '.join(ep.missing_dlls)} missing beside onnxruntime-genai, which AMD's tools check for"
        if ep is not None and ep.missing_dlls
        else ""
    )
    error_126 = (
        " (Windows error 126: the DLL or one it depends on was not found)" if re.search(r"\berror 126\b", low) else ""
    )
    return (
        f"the Ryzen AI EP library{where} was found but could not be loaded{error_126}{dlls}: a DLL it needs is "
        f"missing or from another release. {_ENV_HINT.capitalize()}, and do not mix packages of two Ryzen AI "
        "releases in one environment"
    )
