"""Who runs on the model now: one generation at a time, in arrival order.

A Ryzen AI laptop has one NPU, so a :class:`Scheduler` serves the generations of a loaded
model one by one (:class:`FifoLock`). A call that waits for the model stops the stream that
holds it when nobody has read that stream for :data:`~ryzenai_core.generation.call.ABANDON_AFTER`
seconds: a caller that left a stream unread must not block every other call.
"""

from __future__ import annotations

import threading
import time
from collections import deque

from . import call
from .call import CallControl

__all__ = ["FifoLock", "Scheduler"]


class FifoLock:
    """A lock that serves waiters strictly in arrival order."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiters: deque[threading.Event] = deque()
        self._held = False

    def acquire(self, timeout: float | None = None) -> bool:
        """Wait for our turn (at most ``timeout`` seconds); whether we got it."""
        with self._lock:
            if not self._held and not self._waiters:
                self._held = True
                return True
            me = threading.Event()
            self._waiters.append(me)
        if me.wait(timeout):
            return True
        with self._lock:
            if me.is_set():  # handed over while the wait timed out
                return True
            self._waiters.remove(me)
            return False

    def release(self) -> None:
        """Hand the lock to the next waiter, if any."""
        with self._lock:
            if self._waiters:
                self._waiters.popleft().set()  # ownership passes directly
            else:
                self._held = False

    def __enter__(self) -> FifoLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


class Scheduler:
    """The model's turn: :meth:`acquire` waits for it, :meth:`release` passes it on."""

    def __init__(self) -> None:
        self._lock = FifoLock()
        self._holder: CallControl | None = None

    @property
    def holder(self) -> CallControl | None:
        """The call running on the model, if any."""
        return self._holder

    def acquire(self, control: CallControl) -> bool:
        """Wait for the model: False if cancelled; stops an unread stream holding it (see ABANDON_AFTER).

        Raises:
            GenerationTimeoutError: the call's timeout ran out while it waited.
        """
        if not self._lock.acquire(timeout=0):
            control.enter("queued")
            while True:
                wait = call.QUEUED_POLL
                if control.deadline is not None:
                    wait = min(call.QUEUED_POLL, max(0.0, control.deadline - time.monotonic()))
                if self._lock.acquire(timeout=wait):
                    break
                control.check_deadline()
                if control.cancel.is_set():
                    return False
                self._preempt_idle_holder()
        self._holder = control
        return True

    def release(self) -> None:
        """Pass the model on (its holder is done with it)."""
        self._holder = None
        self._lock.release()

    def _preempt_idle_holder(self) -> None:
        holder = self._holder
        if holder is None:
            return
        with holder.lock:
            idle = holder.idle_since
            if holder.preempted or idle is None or time.monotonic() - idle < call.ABANDON_AFTER:
                return
            holder.preempted = True
        holder.cancel.set()  # it stops within a token and passes the model on
