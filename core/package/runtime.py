"""Which onnxruntime-genai (OGA) is installed, and which Ryzen AI release that means.

Every OGA wheel (CPU, CUDA, DirectML, the Ryzen AI build) installs the same import name
``onnxruntime_genai``; the distribution name and version map to a Ryzen AI release. Whether
a build can run the NPU is decided by the EP library (:mod:`.ep`), not by this name. Nothing
here imports OGA until :func:`import_oga` is called.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import re
import sys
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from types import ModuleType
from typing import Any

from ..errors import InvalidRequestError, RuntimeNotAvailableError

__all__ = [
    "ENV_RELEASE",
    "RuntimeInfo",
    "env_release",
    "import_oga",
    "parse_release",
    "release_for_oga_version",
    "runtime_info",
    "setup_hint",
    "SharedFolder",
    "distributions_named",
    "shared_folders",
]

#: Environment variable that overrides the Ryzen AI release a package is run with.
ENV_RELEASE = "RYZENAI_VERSION"

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
        ryzenai: True for AMD's Ryzen AI build (by its name; whether a build can run the NPU is
            decided by the EP library: :func:`~.ep.npu_runtime`).
        release: the Ryzen AI release that AMD's build belongs to, when known.
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
        kind = f"AMD's Ryzen AI build (release {self.release or 'unknown'})" if self.ryzenai else "a public build"
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
            "onnxruntime-genai is not importable." + found + f" On a Ryzen AI PC, {setup_hint()}; elsewhere "
            "install the CPU build with `pip install 'ryzenai-llm[cpu]'`. Never install both in one environment."
        ) from exc
    return _oga


def env_release() -> str | None:
    """The release named by the ``RYZENAI_VERSION`` environment variable, validated."""
    value = os.environ.get(ENV_RELEASE, "").strip()
    if not value:
        return None
    parse_release(value)
    return value


def setup_hint(*, windows: bool | None = None, start: bool = False) -> str:
    """How to run in the environment AMD's Ryzen AI installer made, for messages (a clause; ``start``: capitalised).

    Windows' installer makes a conda environment; Linux's a virtual environment whose
    ``deployment/lib`` holds the EP library.
    """
    windows = sys.platform == "win32" if windows is None else windows
    if windows:
        hint = "run in the conda environment the Ryzen AI installer created (e.g. `conda activate ryzen-ai-1.8.0`)"
    else:
        hint = (
            "run in the virtual environment the Ryzen AI installer created (`source <venv>/bin/activate`; its EP "
            "library is in `<venv>/deployment/lib`, which AMD's Linux setup adds to LD_LIBRARY_PATH)"
        )
    return "R" + hint[1:] if start else hint


def distributions_named(prefix: str, exclude: str | None = None) -> list[tuple[str, str]]:
    """(name, version) of each installed distribution named ``prefix...`` (and not holding ``exclude``)."""
    found = {
        (str(d.metadata["Name"]), str(d.version))
        for d in _metadata().distributions()
        if (d.metadata["Name"] or "").lower().startswith(prefix)
        and not (exclude and exclude in (d.metadata["Name"] or "").lower())
    }
    return sorted(found)


# ---------------------------------------------------------------------- two builds in one folder
#: Import packages that builds of different distributions install under one name.
SHARED_IMPORTS = ("onnxruntime", "onnxruntime_genai")
#: Libraries that require the distribution ``onnxruntime`` and so install the plain build over
#: AMD's ``onnxruntime-vitisai`` (same import name) in a Ryzen AI environment.
PULLS_PLAIN_ONNXRUNTIME = (
    "chromadb",
    "langchain-chroma",
    "llama-index-vector-stores-chroma",
    "fastembed",
    "unstructured",
)


@dataclass(frozen=True)
class SharedFolder:
    """An import package that more than one installed distribution writes (the last install's files win).

    Attributes:
        folder: the import package (``onnxruntime``).
        owners: each distribution that writes it, ``name version``.
        on_disk: the distribution whose files are there now (by the hashes in the distributions'
            RECORD files), when that was checked and could be told.
    """

    folder: str
    owners: tuple[str, ...]
    on_disk: str | None = None

    def describe(self) -> str:
        """What happened, the harm and the repair, in one message."""
        amd = [o for o in self.owners if "vitisai" in o.lower() or "ryzenai" in o.lower()]
        now = f"; the files there now are {self.on_disk}'s" if self.on_disk else ""
        if amd:
            wheel = amd[0].split()[0]
            repair = (
                f"reinstall AMD's build over it: `pip install --force-reinstall --no-deps <the {wheel} wheel of your "
                "Ryzen AI installation>` (on Windows the wheels are in %RYZEN_AI_INSTALLATION_PATH%)"
            )
        else:
            repair = "reinstall the build you want with `pip install --force-reinstall --no-deps <it>`"
        harm = (
            "the VitisAI EP (embeddings on the NPU) is gone and onnxruntime-genai runs against a foreign onnxruntime"
            if self.folder == "onnxruntime"
            else "which onnxruntime-genai runs is whichever was installed last"
        )
        return (
            f"{len(self.owners)} installed distributions write {self.folder}/ ({', '.join(self.owners)}){now}: {harm}. "
            f"Libraries that require the plain `onnxruntime` ({', '.join(PULLS_PLAIN_ONNXRUNTIME)}) install it over "
            f"AMD's build. Repair: {repair}"
        )


def shared_folders(*, check_files: bool = False) -> list[SharedFolder]:
    """The import packages of :data:`SHARED_IMPORTS` that more than one installed distribution writes.

    Read from each distribution's ``RECORD`` (as text: only the lines of those folders are looked
    at); with ``check_files`` the files on disk are hashed to tell whose they are (a file whose
    hash differs between the distributions' records).
    """
    prefixes = tuple(f"{name}/" for name in SHARED_IMPORTS)
    owners: dict[str, dict[str, Any]] = {name: {} for name in SHARED_IMPORTS}
    for dist in _metadata().distributions():
        record = dist.read_text("RECORD") or ""
        tops = {line.split("/", 1)[0] for line in record.splitlines() if line.startswith(prefixes)}
        if not tops:
            continue
        name = dist.metadata["Name"]
        for top in tops:
            if name:
                owners[top].setdefault(f"{name} {dist.version}", dist)
    out = []
    for folder, found in owners.items():
        if len(found) > 1:
            on_disk = _whose_files(folder, found) if check_files else None
            out.append(SharedFolder(folder, tuple(sorted(found)), on_disk))
    return out


def _whose_files(folder: str, owners: dict[str, Any]) -> str | None:
    """The owner whose recorded hash matches the file on disk, for the largest file recorded with different hashes."""
    import base64
    import hashlib

    records: dict[str, dict[str, tuple[str, int]]] = {}
    for owner, dist in owners.items():
        for path in dist.files or ():
            if path.parts[0] == folder and path.hash is not None and path.hash.mode == "sha256":
                records.setdefault(str(path.as_posix()), {})[owner] = (path.hash.value, path.size or 0)
    differing = [
        (max(size for _, size in by.values()), name, by)
        for name, by in records.items()
        if len({digest for digest, _ in by.values()}) > 1
    ]
    if not differing:
        return None
    _, name, by = max(differing, key=lambda item: (item[0], item[1]))
    owner = next(iter(by))
    try:
        data = Path(str(owners[owner].locate_file(name))).read_bytes()
    except OSError:
        return None
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return next((o for o, (h, _) in by.items() if h == digest), None)
