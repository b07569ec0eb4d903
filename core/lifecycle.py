"""The one registry of shared engines, LLMs and encoders alike, and the one way they close.

Every engine a caller gets by name (:meth:`Engine.get <ryzenai_core.engine.engine.Engine.get>`,
:meth:`EncoderEngine.get <ryzenai_core.embeddings.engine.EncoderEngine.get>`) is held here, by
what decides which engine a call gets (its key), under one lock: a model is loaded once per
process whatever face or copy asks for it. An engine may also be shared under a second key (an
LLM package on the NPU, by what decides its generation), and the names callers used are
remembered with the folder they named then, so the next call with that name skips the lookup.

:func:`close_all` closes every engine of the registry (their workers exit, their sessions are
freed; each opens again on its next call); it runs at interpreter exit, for every kind of model.
Closing is an engine's ``close()``.
"""

from __future__ import annotations

import atexit
import logging
import threading
from collections.abc import Callable, Hashable
from typing import Any, Protocol, TypeVar

__all__ = ["REGISTRY", "Closable", "Registry", "close_all"]

logger = logging.getLogger(__name__)


class Closable(Protocol):
    """What the registry holds: an engine that can free what it holds (and open it again on use)."""

    def close(self) -> None:
        """Free the model: workers exit, sessions close; the next call opens them again."""


E = TypeVar("E", bound=Closable)


class Registry:
    """The shared engines: by key, by a second key they are shared under, and by the names callers used."""

    def __init__(self) -> None:
        self.lock = threading.RLock()  # reentrant: an engine's create() may share it under a second key
        self._engines: dict[Hashable, Any] = {}
        #: a second key an engine is shared under (an LLM package on the NPU: what decides its generation)
        self._shared: dict[Hashable, Any] = {}
        #: how callers named a model (name and settings) -> the folder the name named then, and its key
        self._names: dict[Hashable, tuple[Hashable, Hashable]] = {}

    def named(self, name: Hashable, folder: Hashable, kind: type[E]) -> E | None:
        """The engine of ``kind`` a name led to before, if it still names the same folder (no lock: a look-up)."""
        known = self._names.get(name)
        if known is None or known[0] != folder:
            return None
        engine = self._engines.get(known[1])
        return engine if isinstance(engine, kind) else None

    def get(self, key: Hashable, create: Callable[[], E], name: tuple[Hashable, Hashable] | None = None) -> E:
        """The engine of ``key``: the one there, or ``create()``'s (made under the lock, once).

        ``name`` (the caller's name for the model and the folder it named) is remembered for :meth:`named`.
        """
        with self.lock:
            engine = self._engines.get(key)
            if engine is None:
                engine = create()
                self._engines[key] = engine
            if name is not None:
                self._names[name[0]] = (name[1], key)
            result: E = engine
            return result

    def shared(self, key: Hashable, create: Callable[[], E]) -> tuple[E, bool]:
        """The engine shared under a second ``key``, or ``create()``'s; and whether it was made now.

        Called from the ``create`` of :meth:`get` (the lock is held).
        """
        with self.lock:
            engine = self._shared.get(key)
            if engine is not None:
                return engine, False
            made = create()
            self._shared[key] = made
            return made, True

    def engines(self, kind: type[E] | None = None) -> dict[Hashable, E]:
        """The shared engines now, by key (a copy); only those of ``kind`` when given."""
        with self.lock:
            return {k: e for k, e in self._engines.items() if kind is None or isinstance(e, kind)}

    def forget(self, which: Callable[[Any], bool], kind: type[E] | None = None) -> list[E]:
        """Take the engines whose keys ``which`` picks (of ``kind``, when given) out of the registry.

        The caller closes them; a name that led to one leads nowhere now.
        """
        with self.lock:
            keys = [k for k, e in self._engines.items() if (kind is None or isinstance(e, kind)) and which(k)]
            gone = [self._engines.pop(k) for k in keys]
            kept = {id(e) for e in self._engines.values()}
            self._shared = {k: e for k, e in self._shared.items() if id(e) in kept}  # no key holds it: not shared
            return gone

    def close_all(self) -> None:
        """Close every engine (each opens its model again on its next call)."""
        with self.lock:
            engines = list({id(e): e for e in self._engines.values()}.values())
        for engine in engines:
            try:
                engine.close()
            except Exception as exc:  # noqa: BLE001 - one engine that cannot close does not keep the others open
                logger.warning("closing %r failed: %s", engine, exc)


#: The registry of this process.
REGISTRY = Registry()


def close_all() -> None:
    """Close every shared engine, LLMs and encoders (their workers exit); each opens again on its next call.

    Runs at interpreter exit; call it to free the NPU and the workers now.
    """
    REGISTRY.close_all()


atexit.register(close_all)
