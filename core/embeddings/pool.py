"""An encoder engine's open sessions, one per shape: leased by calls, capped, closed when idle.

The LLM, the embedder and the reranker share one NPU, whose hardware contexts are few: an
engine keeps at most one session per shape it has used, ``max_shapes`` caps how many stay open
(the least recently used idle one closes when another is needed; one in use never does), and a
session unused for ``idle_timeout`` seconds is closed. The next call that needs a closed shape
opens it again (on the NPU from the compile cache).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import weakref
from collections.abc import Callable, Iterator

from .cache import shape_label
from .runner import LocalBackend, WorkerBackend

__all__ = ["Backend", "SessionPool", "Shape"]

log = logging.getLogger("ryzenai_core")

Shape = tuple[int, int] | None
Backend = LocalBackend | WorkerBackend


class SessionPool:
    """The sessions of one engine by shape (None: its dynamic session), least recently used first.

    Args:
        name: the model's name (log lines, the idle timer's thread name).
        max_shapes: sessions kept open at once (None: one per shape used).
        idle_timeout: seconds after which an unused session is closed (None: kept until :meth:`close`).
    """

    def __init__(self, name: str, max_shapes: int | None, idle_timeout: float | None) -> None:
        self.name = name
        self.max_shapes = max_shapes
        self.idle_timeout = idle_timeout
        self._backends: dict[Shape, Backend] = {}  # least recently used first
        self._leases: dict[Shape, int] = {}  # calls running on each shape's session now
        self._used: dict[Shape, float] = {}  # when each shape's session was last released
        self._timer: threading.Timer | None = None
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def lease(self, shape: Shape, make: Callable[[], Backend]) -> Iterator[Backend]:
        """The session of ``shape`` for one call (``make()`` when there is none; never closed while leased).

        The session is not opened here: the caller opens it (:meth:`LocalBackend.open`).
        """
        with self._lock:
            backend = self._backends.pop(shape, None)
            if backend is None:
                backend = make()
            self._backends[shape] = backend
            self._leases[shape] = self._leases.get(shape, 0) + 1
            closing = self._over_limit()
        self._close(closing, "to stay within max_shapes")
        try:
            yield backend
        finally:
            with self._lock:
                left = self._leases.pop(shape, 1) - 1
                if left:
                    self._leases[shape] = left
                if self._backends.get(shape) is backend:
                    self._used[shape] = time.monotonic()
                closing = self._over_limit()
                self._arm_idle_timer()
            self._close(closing, "to stay within max_shapes")

    def shapes(self) -> list[Shape]:
        """The shapes with a session now, least recently used first."""
        with self._lock:
            return list(self._backends)

    def backends(self) -> dict[Shape, Backend]:
        """Each shape's session now (a copy), least recently used first."""
        with self._lock:
            return dict(self._backends)

    @property
    def idle_timer(self) -> threading.Timer | None:
        """The pending timer that closes the next idle session (a daemon thread), if any."""
        return self._timer

    def _over_limit(self) -> list[tuple[Shape, Backend]]:
        """Take out the least recently used idle sessions beyond ``max_shapes`` (holding the lock)."""
        out: list[tuple[Shape, Backend]] = []
        if self.max_shapes is None:
            return out
        idle = [s for s in self._backends if not self._leases.get(s)]
        while len(self._backends) > self.max_shapes and idle:
            shape = idle.pop(0)
            out.append((shape, self._backends.pop(shape)))
            self._used.pop(shape, None)
        return out

    def _arm_idle_timer(self) -> None:
        """Start the timer that closes the next session to go idle for ``idle_timeout`` (holding the lock)."""
        if self.idle_timeout is None or self._timer is not None:
            return
        idle = [self._used[s] for s in self._backends if not self._leases.get(s) and s in self._used]
        if not idle:
            return
        delay = max(0.0, min(idle) + self.idle_timeout - time.monotonic())
        timer = threading.Timer(delay, _close_idle, args=(weakref.ref(self),))
        timer.daemon = True  # a pending timer never keeps the program from exiting
        timer.name = f"ryzenai-idle-{self.name}"
        self._timer = timer
        timer.start()

    def close_idle(self) -> None:
        """Close the sessions unused for ``idle_timeout`` seconds (the idle timer calls it)."""
        if self.idle_timeout is None:
            return
        now = time.monotonic()
        with self._lock:
            self._timer = None
            idle = [
                s
                for s in self._backends
                if not self._leases.get(s) and s in self._used and now - self._used[s] >= self.idle_timeout
            ]
            closing = [(s, self._backends.pop(s)) for s in idle]
            for s in idle:
                del self._used[s]
            self._arm_idle_timer()
        self._close(closing, f"after {self.idle_timeout:g} s unused")

    def _close(self, sessions: list[tuple[Shape, Backend]], why: str) -> None:
        for shape, backend in sessions:
            log.info("closing %s's session of shape %s %s", self.name, shape_label(shape), why)
            backend.close()

    def close(self) -> None:
        """Close every session and stop the idle timer (the next lease makes a new session)."""
        with self._lock:
            backends, self._backends = list(self._backends.values()), {}
            self._leases.clear()
            self._used.clear()
            timer, self._timer = self._timer, None
        if timer is not None:
            timer.cancel()
        for backend in backends:
            backend.close()


def _close_idle(ref: weakref.ref[SessionPool]) -> None:
    pool = ref()  # the timer holds no strong reference: a pool nobody uses can be collected
    if pool is not None:
        pool.close_idle()
