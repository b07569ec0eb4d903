"""The one registry of shared engines, and the names that lead to them.

An engine is shared by every caller that names the same folder, provider, thread count,
release, execution and session options (its :class:`Slot`); on a Ryzen AI package run by its
own provider, by every caller whose generation would be the same on the NPU (see
:func:`npu_identity`), so the NPU never holds two copies of a model. How a caller named a
model (a folder, an embedded model's name, a repository id, with its settings) is remembered
with the folder it named then, so the next call with that name skips the lookup as long as the
name still names the same folder.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
from collections.abc import Callable
from typing import Any, Generic, NamedTuple, Protocol, TypeVar

from ..errors import RyzenAIError
from ..generation.loader import SessionKey
from ..package.folder import ModelPackage

__all__ = ["Registry", "Slot", "folder_identity", "npu_identity"]

logger = logging.getLogger(__name__)


class Slot(NamedTuple):
    """What decides which engine a call gets: the session's key and the execution."""

    key: SessionKey
    execution: str


class _Shared(Protocol):
    key: SessionKey


E = TypeVar("E", bound=_Shared)


def folder_identity(name: str) -> tuple[int, int] | None:
    """(device, inode) of what ``name`` names in the file system (a symlink's target), None if nothing."""
    try:
        st = os.stat(name)
    except (OSError, ValueError):
        return None
    return (st.st_dev, st.st_ino)


def npu_identity(key: SessionKey, package: ModelPackage, mode: str) -> tuple[Any, ...] | None:
    """What decides a generation of a Ryzen AI package on its own provider; None for other runs.

    The model runs on the NPU there: the CPU thread count does not change a generation, and a
    release matters only through the budget it gives (two releases with the same prompt limit
    plan the same calls). Engines with the same identity share one loaded model, so the NPU
    never holds two copies of it. A CPU run keeps its thread count (it is its speed).
    """
    if not package.is_ryzenai or key.provider is not None:
        return None
    try:
        budget = dataclasses.replace(package.budget, prompt_limit_source="")
    except RyzenAIError:  # a package whose budget cannot be read: its calls say why, nothing is shared
        return None
    return (key.path, key.session_options, mode, budget)


class Registry(Generic[E]):
    """The shared engines: by slot, by NPU identity and by the names callers used, under one lock."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self._engines: dict[Slot, E] = {}
        #: Ryzen AI packages on their own provider: what decides a generation -> its engine
        self._npu: dict[tuple[Any, ...], E] = {}
        #: how callers named a model (name and settings) -> the folder the name named then, and its slot
        self._names: dict[tuple[Any, ...], tuple[tuple[int, int] | None, Slot]] = {}

    def named(self, name: tuple[Any, ...], folder: tuple[int, int] | None) -> E | None:
        """The engine a name led to before, if it still names the same folder (no lock: a look-up)."""
        known = self._names.get(name)
        if known is None or known[0] != folder:
            return None
        return self._engines.get(known[1])

    def get(
        self,
        slot: Slot,
        create: Callable[[ModelPackage], E],
        name: tuple[tuple[Any, ...], tuple[int, int] | None] | None = None,
    ) -> E:
        """The engine of ``slot``: the one there, the one whose NPU generation is the same, or a new one.

        ``create(package)`` makes a new engine; ``name`` (the caller's name and the folder it
        named) is remembered for :meth:`named`.
        """
        with self.lock:
            engine = self._engines.get(slot)
            if engine is None:
                package = ModelPackage.open(slot.key.path, release=slot.key.release)
                shared = npu_identity(slot.key, package, slot.execution)
                engine = self._npu.get(shared) if shared is not None else None
                if engine is None:
                    engine = create(package)
                    if shared is not None:
                        self._npu[shared] = engine
                else:
                    logger.info(
                        "%s: num_threads=%s, release=%s share the loaded model of num_threads=%s, release=%s "
                        "(the same generation on the NPU; the model is not loaded twice)",
                        package.name,
                        slot.key.num_threads,
                        slot.key.release,
                        engine.key.num_threads,
                        engine.key.release,
                    )
                self._engines[slot] = engine
            if name is not None:
                self._names[name[0]] = (name[1], slot)
            return engine

    def engines(self) -> dict[Slot, E]:
        """The shared engines now, by slot (a copy)."""
        with self.lock:
            return dict(self._engines)

    def forget(self, which: Callable[[Slot], bool]) -> list[E]:
        """Take the engines of the slots ``which`` picks out of the registry (the caller closes them)."""
        with self.lock:
            gone = [self._engines.pop(slot) for slot in [s for s in self._engines if which(s)]]
            kept = {id(e) for e in self._engines.values()}
            self._npu = {k: e for k, e in self._npu.items() if id(e) in kept}  # an engine no slot holds is not shared
            return gone
