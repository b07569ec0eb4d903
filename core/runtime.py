"""Which onnxruntime-genai (OGA) is installed, and which Ryzen AI release that means.

Every OGA wheel (CPU, CUDA, DirectML, the Ryzen AI build) installs the same import name
``onnxruntime_genai``, so the distribution name tells them apart. Nothing here imports
OGA until :func:`import_oga` is called.
"""

from __future__ import annotations

import importlib
import importlib.metadata as md
import os
import re
from dataclasses import dataclass
from functools import lru_cache
from types import ModuleType

from .errors import InvalidRequestError, RuntimeNotAvailableError

__all__ = [
    "ENV_RELEASE",
    "RuntimeInfo",
    "import_oga",
    "parse_release",
    "release_for_oga_version",
    "runtime_info",
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


@lru_cache(maxsize=1)
def runtime_info() -> RuntimeInfo:
    """Describe the installed onnxruntime-genai without importing it."""
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
