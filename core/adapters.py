"""LoRA adapters as a call names them: a model object's ``adapters`` map, and the file a call chooses.

A model object takes ``adapters={"sql": "C:/adapters/sql.onnx_adapter", ...}`` (checked when it
is made: :func:`adapter_files`) and a call chooses one by name, or none for the base model
(:func:`chosen_adapter`). What the call then carries is a :class:`LoraAdapter`: the name the
caller used, the file's real path, and its size and modification time, which say whether it
is the file a worker already loaded (a file rebuilt in place is loaded again). Loading and
checking the file against the model is the worker's (:mod:`ryzenai_core.generation.adapters`).

Plain data and functions: a worker receives a :class:`LoraAdapter` in a call's options.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import InvalidRequestError

__all__ = ["ADAPTER_SUFFIX", "LoraAdapter", "adapter_files", "chosen_adapter"]

#: The suffix of onnxruntime's adapter files (what Olive's ``convert-adapters`` and ``AdapterFormat`` write).
ADAPTER_SUFFIX = ".onnx_adapter"


@dataclass(frozen=True)
class LoraAdapter:
    """One LoRA adapter file, as a call chose it.

    Attributes:
        name: the caller's name for it (what metadata reports).
        path: the file's real path (links resolved: a Hugging Face cache holds links to blobs).
        size: its size in bytes, when the call was made.
        mtime_ns: its modification time, when the call was made.
    """

    name: str
    path: str
    size: int
    mtime_ns: int

    @classmethod
    def of(cls, path: str | os.PathLike[str], name: str | None = None) -> LoraAdapter:
        """The adapter in the file at ``path`` as it is now (``name``: the file's stem when None).

        Raises:
            InvalidRequestError: no such file, or a folder.
        """
        given = Path(os.fspath(path)).expanduser()
        real = given.resolve()
        label = name if name is not None else given.stem
        if not real.exists():
            raise InvalidRequestError(
                f"adapter {label!r}: {os.fspath(path)} does not exist; give the path of an {ADAPTER_SUFFIX} file"
            )
        if not real.is_file():
            raise InvalidRequestError(
                f"adapter {label!r}: {os.fspath(path)} is a folder; give the path of an {ADAPTER_SUFFIX} file in it "
                f"(a PEFT adapter folder is converted into one first: see docs/adapters.md)"
            )
        stat = real.stat()
        return cls(label, str(real), stat.st_size, stat.st_mtime_ns)

    @property
    def identity(self) -> tuple[str, int, int]:
        """What makes two choices the same loaded file: its real path, size and modification time."""
        return (self.path, self.size, self.mtime_ns)


def adapter_files(value: Any) -> dict[str, str]:
    """A model object's ``adapters`` setting, checked: names to paths of existing files (path objects as text).

    Raises:
        InvalidRequestError: not a mapping, an empty or non-text name, a path that is no file.
    """
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise InvalidRequestError(
            f"adapters must map names to {ADAPTER_SUFFIX} files ({{'sql': 'adapters/sql{ADAPTER_SUFFIX}'}}), "
            f"got {type(value).__name__}"
        )
    out: dict[str, str] = {}
    for name, path in value.items():
        if not isinstance(name, str) or not name.strip():
            raise InvalidRequestError(f"adapters: each name must be a non-empty string, got {name!r}")
        if not isinstance(path, (str, os.PathLike)):
            raise InvalidRequestError(f"adapters[{name!r}] must be a path, got {type(path).__name__}")
        LoraAdapter.of(path, name)  # the file is there now
        out[name] = os.fspath(path)
    return out


def chosen_adapter(name: Any, files: Mapping[str, str], owner: str, called: str = "adapter") -> LoraAdapter | None:
    """The adapter a call chose by ``name`` among the model object's ``files`` (None: the base model).

    Args:
        name: the call's (or the object's) choice: a name of ``files``, or None.
        files: the object's ``adapters`` (names to paths).
        owner: who was called, for messages (``"ChatRyzenAI"``).
        called: what the caller calls the option, for messages.

    Raises:
        InvalidRequestError: a name that is not among ``files`` (listing those that are), a
            value that is no name, or a file that is gone.
    """
    if name is None:
        return None
    if isinstance(name, LoraAdapter):
        return name
    if not isinstance(name, str):
        raise InvalidRequestError(
            f"{called}={name!r}: choose an adapter by its name in {owner}(adapters={{...}}), or None for the base model"
        )
    if name not in files:
        known = ", ".join(repr(n) for n in files) if files else "none (the model object has no adapters)"
        raise InvalidRequestError(
            f"{called}={name!r} is not one of the adapters of this {owner}: {known}. Name its file in "
            f"{owner}(adapters={{{name!r}: 'path/to/{name}{ADAPTER_SUFFIX}', ...}}), or pass {called}=None for "
            "the base model"
        )
    return LoraAdapter.of(files[name], name)
