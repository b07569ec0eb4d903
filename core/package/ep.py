"""The Ryzen AI execution provider (EP) library: whether this onnxruntime-genai can run the NPU here.

Since onnxruntime-genai 0.12 every build carries AMD's RyzenAI code, and a package with
``RyzenAI`` provider options makes it load AMD's EP library (``onnxruntime_providers_ryzenai``).
So what decides whether a build can run the NPU is that library, never the distribution's
name (which only maps a version to a Ryzen AI release):

- :func:`find_ryzenai_ep` repeats onnxruntime-genai's search for it (``src/ryzenai/interface.cpp``),
  and also looks where AMD's installers put it when the runtime would not look there (Linux:
  ``<venv>/deployment/lib``);
- :func:`probe_ep_library` loads it in a child process (after importing onnxruntime-genai, as
  the runtime has it then), so that a missing dependency, or a library of another release (no
  ``CreateEpFactories``), is named before any model load;
- :func:`npu_runtime` puts both together with the installed runtime (:class:`NpuRuntime`);
- :func:`worker_environment` is the environment a worker process starts with, so that its
  runtime finds the library the search found (``RYZENAI_EP_PATH``; on Linux its folder first on
  ``LD_LIBRARY_PATH``, which only a parent can set for a child);
- :func:`prepare_ryzenai_runtime` does, in the process that loads the model, what AMD's own
  tools do, and :func:`explain_ryzenai_failure` turns the runtime's failure texts into their
  cause and fix.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import sys
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from .runtime import RuntimeInfo, release_for_oga_version, runtime_info, setup_hint

__all__ = [
    "ENV_EP_PATH",
    "EP_FILENAME",
    "EP_SYMBOL",
    "EpLoad",
    "EpSearch",
    "NpuRuntime",
    "explain_ryzenai_failure",
    "find_ryzenai_ep",
    "npu_runtime",
    "prepare_ryzenai_runtime",
    "probe_ep_library",
    "worker_environment",
]

#: Environment variable onnxruntime-genai reads first for the Ryzen AI EP library: its full path.
ENV_EP_PATH = "RYZENAI_EP_PATH"
#: The Ryzen AI EP library's file name, as onnxruntime-genai 0.12 and later looks for it (by platform: Windows?).
EP_FILENAME = {True: "onnxruntime_providers_ryzenai.dll", False: "libonnxruntime_providers_ryzenai.so"}
#: The entry point onnxruntime looks up in an EP library it registers.
EP_SYMBOL = "CreateEpFactories"
#: DLLs Lemonade checks beside onnxruntime-genai before it loads an NPU package with Ryzen AI 1.6.
WINDOWS_DLLS = ("libutf8_validity.dll", "abseil_dll.dll")
#: The onnxruntime-genai line from which the RyzenAI code (and its search for the EP library) is in every build.
EP_SEARCH_SINCE = (0, 12)


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
        path: the library a process started by ryzenai-llm loads: the runtime's own find, else
            ``elsewhere`` (passed to workers as ``RYZENAI_EP_PATH``); None when there is none.
        source: where ``path`` came from (``RYZENAI_EP_PATH``, ``next to onnxruntime-genai``, ...).
        searched: every (place, path) the runtime looks at, in order.
        problem: why no library is found, with the fix; None when one is.
        missing_dlls: with Ryzen AI 1.6 on Windows, the DLLs AMD's tools expect beside onnxruntime-genai
            that are not there.
        elsewhere: a library where AMD's installers put it but the runtime does not look (Linux:
            ``<venv>/deployment/lib``), when the runtime's own search finds none.
    """

    filename: str
    path: Path | None
    source: str | None
    searched: tuple[tuple[str, Path], ...]
    problem: str | None = None
    missing_dlls: tuple[str, ...] = ()
    elsewhere: Path | None = None

    @property
    def found(self) -> bool:
        """Whether a process started by ryzenai-llm finds a library file."""
        return self.path is not None

    @property
    def runtime_finds(self) -> bool:
        """Whether onnxruntime-genai finds it by itself (in any program, not only in ryzenai-llm's workers)."""
        return self.path is not None and self.elsewhere is None

    def describe(self) -> str:
        """One line: where it was found (and how), or why not."""
        if self.path is None:
            return str(self.problem)
        if self.elsewhere is not None:
            return (
                f"{self.path} ({self.source}); onnxruntime-genai does not look there by itself: ryzenai-llm passes "
                f"{ENV_EP_PATH}={self.path} to its workers (other programs need `export {ENV_EP_PATH}={self.path}`)"
            )
        return f"{self.path} ({self.source})"


def find_ryzenai_ep(
    *,
    windows: bool | None = None,
    environ: Mapping[str, str] | None = None,
    genai_dir: Path | None = None,
    ort_dir: Path | None = None,
    exe_dir: Path | None = None,
    cwd: Path | None = None,
    prefix: Path | None = None,
    dll_check: bool | None = None,
) -> EpSearch:
    """Repeat onnxruntime-genai's search for the Ryzen AI EP library (``src/ryzenai/interface.cpp``).

    In order: the file ``RYZENAI_EP_PATH`` names (used as it is, even when it does not
    exist); on Windows only, the library next to onnxruntime-genai's DLL, next to onnxruntime's
    DLL and next to the executable; last, the current working folder. Linux looks only at
    ``RYZENAI_EP_PATH`` and the working folder. When that finds nothing, the places AMD's
    installers use are looked at too (``<prefix>/deployment/lib``, the Ryzen AI installation
    folder, and on Linux the onnxruntime-genai and onnxruntime folders): a library there is
    :attr:`EpSearch.elsewhere`.

    Every argument defaults to this process (the platform, ``os.environ``, the installed
    ``onnxruntime_genai`` and ``onnxruntime/capi`` folders, ``sys.executable``'s folder, the
    working folder, ``sys.prefix``; the 1.6 DLL check when the installed runtime is Ryzen AI 1.6);
    tests pass their own.
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
    prefix = Path(sys.prefix) if prefix is None else prefix
    if dll_check is None:
        dll_check = (runtime_info().release or "").startswith("1.6")
    name = EP_FILENAME[windows]
    missing = tuple(
        d for d in WINDOWS_DLLS if dll_check and windows and genai_dir is not None and not (genai_dir / d).is_file()
    )

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

    install = environ.get("RYZEN_AI_INSTALLATION_PATH", "")
    layouts: list[tuple[str, Path | None]] = [("in this environment's deployment/lib", prefix / "deployment" / "lib")]
    if install:
        root = Path(install)
        layouts += [("in the Ryzen AI installation", folder) for folder in (root, root / "deployment" / "lib")]
    if not windows:
        layouts += [("next to onnxruntime-genai", genai_dir), ("next to onnxruntime", ort_dir)]
    for place, folder in layouts:
        if folder is not None and (folder / name).is_file():
            found = folder / name
            return EpSearch(name, found, place, tuple(places), missing_dlls=missing, elsewhere=found)

    if windows:
        where = ", ".join(f"{place} ({path.parent})" for place, path in places)
        problem = (
            f"{name} is not found ({ENV_EP_PATH} is unset; looked {where}): {setup_hint(windows=True)}, or set "
            f"{ENV_EP_PATH} to the library's full path"
        )
    else:
        problem = (
            f"{name} is not found: {ENV_EP_PATH} is unset, and on Linux onnxruntime-genai looks only there and "
            f"in the working folder ({cwd}); it is not in {prefix / 'deployment' / 'lib'} either, where AMD's Linux "
            f"installer puts it. {setup_hint(windows=False, start=True)}, or set {ENV_EP_PATH} to the library's "
            "full path in your Ryzen AI installation."
        )
    return EpSearch(name, None, None, tuple(places), problem, missing)


# ---------------------------------------------------------------------- loading it, in a child
@dataclass(frozen=True)
class EpLoad:
    """What loading the EP library in a child process showed.

    Attributes:
        status: ``loaded`` (it loads and has ``CreateEpFactories``), ``other release`` (it loads
            but lacks that entry point), ``not loadable`` (it, or a library it needs, does not load).
        detail: the loader's own words (the missing library it names), or what is missing.
    """

    status: str
    detail: str

    @property
    def ok(self) -> bool:
        """Whether the library loads as onnxruntime loads an EP library."""
        return self.status == "loaded"

    def explain(self, path: Path) -> str:
        """The cause and fix, for messages (empty when it loaded)."""
        if self.status == "other release":
            return (
                f"the Ryzen AI EP library {path} loads but has no {EP_SYMBOL} entry point: it is an EP library of "
                "another Ryzen AI release than this onnxruntime-genai expects (or not an EP library). Install the "
                "EP library of the release your onnxruntime-genai belongs to (in one Ryzen AI environment, never "
                "mixed with another release's)"
            )
        if self.status == "not loadable":
            return (
                f"the Ryzen AI EP library {path} is found but does not load: {self.detail}. A library it needs is "
                f"missing or from another release: {setup_hint()}"
            )
        return ""


# Run as ``python -c _PROBE <library> <dll folder>``: import the runtime (its onnxruntime is then
# loaded, as when the runtime loads the EP), then load the library and look up its entry point.
_PROBE = """
import ctypes, json, os, sys
path, folder = sys.argv[1], sys.argv[2]
if folder and hasattr(os, "add_dll_directory"):
    os.add_dll_directory(folder)
    os.environ["PATH"] = folder + os.pathsep + os.environ.get("PATH", "")
try:
    import onnxruntime_genai
except Exception:
    pass
try:
    lib = ctypes.CDLL(path)
except OSError as exc:
    print(json.dumps({"status": "not loadable", "detail": str(exc)}))
    raise SystemExit(0)
found = hasattr(lib, sys.argv[3])
detail = "" if found else sys.argv[3] + " missing"
print(json.dumps({"status": "loaded" if found else "other release", "detail": detail}))
"""


def probe_ep_library(path: Path, *, environ: Mapping[str, str] | None = None) -> EpLoad:
    """Load the EP library at ``path`` in a child process started with ``environ`` (default: a worker's).

    The result is kept per library file (its size and time) and environment.
    """
    env = dict(environ) if environ is not None else worker_environment(os.environ) or dict(os.environ)
    try:
        stat = path.stat()
    except OSError as exc:
        return EpLoad("not loadable", str(exc))
    keep = (env.get("LD_LIBRARY_PATH", ""), env.get("PATH", ""))
    return _probe(str(path), stat.st_size, stat.st_mtime_ns, keep, json.dumps(env, sort_keys=True))


@lru_cache(maxsize=8)
def _probe(path: str, size: int, mtime: int, keep: tuple[str, str], env: str) -> EpLoad:
    import subprocess  # here: a model worker that imports this module never starts a process

    genai = _package_dir("onnxruntime_genai") if sys.platform == "win32" else None
    try:
        done = subprocess.run(
            [sys.executable, "-c", _PROBE, path, str(genai or ""), EP_SYMBOL],
            capture_output=True,
            text=True,
            timeout=120,
            stdin=subprocess.DEVNULL,
            env=json.loads(env),
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return EpLoad("not loadable", f"the child process that tried failed: {type(exc).__name__}: {exc}")
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode == 0 and lines:
        data = json.loads(lines[-1])
        return EpLoad(str(data["status"]), str(data["detail"]))
    errors = [line for line in done.stderr.strip().splitlines() if line.strip()]
    last = f": {errors[-1]}" if errors else ""
    return EpLoad("not loadable", f"loading it ended the process (exit code {done.returncode}){last}")


# ---------------------------------------------------------------------- the verdict
def _version_tuple(version: str | None) -> tuple[int, int] | None:
    m = re.match(r"(\d+)\.(\d+)", version or "")
    return (int(m.group(1)), int(m.group(2))) if m else None


@dataclass(frozen=True)
class NpuRuntime:
    """Whether the installed onnxruntime-genai can run a Ryzen AI package on the NPU here.

    Attributes:
        info: the installed onnxruntime-genai (from its distribution's metadata).
        ep: the EP library search; None for AMD's builds older than onnxruntime-genai 0.12, which
            bring their provider another way (not checked here).
        load: the child process's try of the library, when one was found.
        usable: whether a Ryzen AI package can be handed to this runtime.
        release: the Ryzen AI release this runtime belongs to: an AMD build's, or for any build whose
            EP library loads, the release its version ships with; None when unknown.
        problem: why not usable, with the fix; None when usable.
    """

    info: RuntimeInfo
    ep: EpSearch | None
    load: EpLoad | None
    usable: bool
    release: str | None
    problem: str | None

    def describe(self) -> str:
        """One line for messages: the build, and what it runs the NPU with."""
        if not self.info.installed:
            return self.info.describe()
        release = f"Ryzen AI release {self.release}" if self.release else "Ryzen AI release unknown"
        if self.usable and self.ep is not None and self.ep.path is not None:
            build = f"{self.info.distribution} {self.info.version}"
            return f"{build} with the Ryzen AI EP library {self.ep.path} ({release})"
        if self.usable:
            return f"{self.info.distribution} {self.info.version}, Ryzen AI build ({release})"
        return self.info.describe()


def npu_runtime(*, environ: Mapping[str, str] | None = None) -> NpuRuntime:
    """The installed runtime's verdict for Ryzen AI packages (see the module docstring)."""
    info = runtime_info()
    if not info.installed:
        return NpuRuntime(info, None, None, False, None, f"no onnxruntime-genai is installed: {setup_hint()}")
    version = _version_tuple(info.version)
    if version is None or version < EP_SEARCH_SINCE:
        if info.ryzenai:
            return NpuRuntime(info, None, None, True, info.release, None)
        return NpuRuntime(
            info,
            None,
            None,
            False,
            None,
            f"{info.describe()} has no RyzenAI execution provider (onnxruntime-genai before 0.12 has it only in "
            f"AMD's own build): {setup_hint()}",
        )
    ep = find_ryzenai_ep(environ=environ)
    release = info.release
    if ep.path is None:
        return NpuRuntime(info, ep, None, False, release, f"the Ryzen AI EP library cannot be found: {ep.problem}")
    env = worker_environment(environ, ep=ep) or dict(os.environ if environ is None else environ)
    load = probe_ep_library(ep.path, environ=env)
    if not load.ok:
        return NpuRuntime(info, ep, load, False, release, load.explain(ep.path))
    return NpuRuntime(info, ep, load, True, release or release_for_oga_version(info.version or ""), None)


# ---------------------------------------------------------------------- the worker's environment
def worker_environment(
    environ: Mapping[str, str] | None = None, *, ep: EpSearch | None = None, windows: bool | None = None
) -> dict[str, str] | None:
    """The environment of a process that may load a Ryzen AI package, or None when ``environ`` needs no change.

    With a library found (``ep``, default: :func:`find_ryzenai_ep`'s over ``environ``): its path
    as ``RYZENAI_EP_PATH`` (the runtime then finds it whatever the child's working folder, and
    where it would not look by itself), and on Linux its folder first on ``LD_LIBRARY_PATH`` (the
    libraries beside it, as AMD's Linux setup asks; the dynamic loader reads that variable only
    when a process starts).
    """
    environ = os.environ if environ is None else environ
    windows = sys.platform == "win32" if windows is None else windows
    ep = find_ryzenai_ep(environ=environ, windows=windows, dll_check=False) if ep is None else ep
    if ep.path is None:
        return None
    changes: dict[str, str] = {}
    if environ.get(ENV_EP_PATH, "") != str(ep.path):
        changes[ENV_EP_PATH] = str(ep.path)
    if not windows:
        folder = str(ep.path.parent)
        current = environ.get("LD_LIBRARY_PATH", "")
        if folder not in current.split(os.pathsep):
            changes["LD_LIBRARY_PATH"] = folder + (os.pathsep + current if current else "")
    return {**environ, **changes} if changes else None


_DLL_DIRECTORIES: dict[str, Any] = {}  # folder -> os.add_dll_directory handle, kept for the process's life


def prepare_ryzenai_runtime(
    *, windows: bool | None = None, environ: MutableMapping[str, str] | None = None
) -> EpSearch:
    """Before loading a Ryzen AI package: what AMD's tools do, then where the EP library is.

    On Windows, Lemonade puts the ``onnxruntime_genai`` package folder (where the Ryzen AI
    build keeps the EP's DLLs) first on ``PATH`` and adds it with ``os.add_dll_directory``;
    both are per process (a child does not inherit a DLL directory), so the process that loads
    the model calls this. A library found where the runtime does not look is named to it in
    ``RYZENAI_EP_PATH`` (a worker gets it from its parent already).
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
    ep = find_ryzenai_ep(windows=windows, environ=environ, genai_dir=genai)
    if ep.elsewhere is not None:
        environ[ENV_EP_PATH] = str(ep.elsewhere)
    return ep


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
            "this onnxruntime-genai build has no RyzenAI execution provider (a public build older than 0.12, not "
            f"AMD's Ryzen AI build): {setup_hint()}, or install AMD's build of onnxruntime-genai"
        )
    where = f" ({ep.path}, {ep.source})" if ep is not None and ep.path is not None else ""
    if EP_SYMBOL.lower() in low and "symbol" in low:
        return (
            f"the Ryzen AI EP library{where} has no {EP_SYMBOL} entry point: it is an EP library of another Ryzen AI "
            "release than this onnxruntime-genai expects. Use one Ryzen AI environment, with the EP library of the "
            "release your onnxruntime-genai belongs to"
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
        f"missing or from another release. {setup_hint(start=True)}, and do not mix packages of two Ryzen AI "
        "releases in one environment"
    )
