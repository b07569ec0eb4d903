"""Who runs on the model now: one generation at a time, in arrival order.

A Ryzen AI laptop has one NPU, so a :class:`Scheduler` serves the generations of a loaded
model one by one (:class:`FifoLock`). A call that waits for the model stops the stream that
holds it when its caller has not read it for :data:`ABANDON_AFTER` seconds: a caller that left
a stream unread must not block every other call. :class:`ReadWatch` is that policy, on one
clock, for the streams of this process and for those of a worker process alike.
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque

from ..errors import StreamAbandonedError
from .call import CallControl, Phase

__all__ = ["ABANDON_AFTER", "QUEUED_POLL", "FifoLock", "ReadWatch", "Scheduler", "abandoned_error"]

#: Seconds a stream may go unread while another call waits for the model before it is stopped.
ABANDON_AFTER = float(os.environ.get("RYZENAI_LLM_ABANDON_AFTER", "2.0"))
#: Seconds between looks at an unread stream holding the model while a call waits for it.
QUEUED_POLL = 0.25


def abandoned_error(tokens: int) -> StreamAbandonedError:
    """The error that ends a stream stopped because nobody read it while another call waited."""
    return StreamAbandonedError(
        f"this stream was stopped after {tokens} tokens: it was not read for {ABANDON_AFTER:g} s while another "
        "call waited for the model (one generation runs at a time). The chunks before it were delivered. Read "
        "streams to the end, or close them (`with contextlib.closing(llm.stream(...)) as chunks:`)"
    )


class ReadWatch:
    """Whether a stream's caller reads it; decides when an unread stream is stopped.

    The caller says when a chunk was handed to it (:meth:`handed`) and when it is back for the
    next (:meth:`reading`); a call waiting for the model asks :meth:`preempt` whether to stop it.
    """

    __slots__ = ("_idle_since", "_lock", "_preempted")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._idle_since: float | None = None
        self._preempted = False

    def handed(self) -> None:
        """A chunk went to the caller: the stream is unread until the caller is back."""
        self._idle_since = time.monotonic()

    def reading(self) -> None:
        """The caller waits for the next chunk."""
        self._idle_since = None

    @property
    def preempted(self) -> bool:
        """Whether the stream was stopped as unread (its end is then :func:`abandoned_error`)."""
        return self._preempted

    def preempt(self) -> bool:
        """Whether to stop the stream now: unread for :data:`ABANDON_AFTER` seconds (told once)."""
        with self._lock:
            idle = self._idle_since
            if self._preempted or idle is None or time.monotonic() - idle < ABANDON_AFTER:
                return False
            self._preempted = True
            return True


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
        self._holding: tuple[CallControl, ReadWatch | None] | None = None  # the holder and its reader, at once

    @property
    def holder(self) -> CallControl | None:
        """The call running on the model, if any."""
        holding = self._holding
        return holding[0] if holding is not None else None

    def acquire(self, control: CallControl, reader: ReadWatch | None = None) -> bool:
        """Wait for the model: False if cancelled; stops an unread stream holding it (see :class:`ReadWatch`).

        ``reader`` says whether this call's own stream is read (None: nobody stops it).

        Raises:
            GenerationTimeoutError: the call's timeout ran out while it waited.
        """
        if not self._lock.acquire(timeout=0):
            control.enter(Phase.QUEUED)
            while True:
                wait = QUEUED_POLL
                if control.deadline is not None:
                    wait = min(QUEUED_POLL, max(0.0, control.deadline - time.monotonic()))
                if self._lock.acquire(timeout=wait):
                    break
                control.check_deadline()
                if control.cancel.is_set():
                    return False
                self._preempt_unread_holder()
        self._holding = (control, reader)
        return True

    def release(self) -> None:
        """Pass the model on (its holder is done with it)."""
        self._holding = None
        self._lock.release()

    def _preempt_unread_holder(self) -> None:
        holding = self._holding
        if holding is not None and holding[1] is not None and holding[1].preempt():
            holding[0].cancel.set()  # it stops within a token and passes the model on
