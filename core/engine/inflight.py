"""The in-flight call and its one wait loop, and the contract of a backend.

:class:`PendingCall` is one call seen from its caller: the backend puts items on its queue
(an :data:`Item`: a chunk, the end or an error); :func:`next_item` and
:func:`anext_item` are the sync and async waits, each with the caller's deadline.
:class:`Backend` runs a call (:mod:`.inline` in this process, :mod:`.client` in a worker) and
owns the two stream loops built on those waits.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import time
from collections.abc import AsyncGenerator, Callable, Generator

from ..errors import GenerationTimeoutError, WorkerDiedError
from ..generation import scheduler
from ..generation.call import CallControl, CallSpec, Phase
from ..generation.scheduler import ReadWatch, abandoned_error
from ..generation.streaming import Chunk
from ..request import Request

__all__ = [
    "REPORT_MARGIN",
    "Backend",
    "Item",
    "PendingCall",
    "anext_item",
    "caller_deadline",
    "caller_deadline_passed",
    "next_item",
    "wait_slice",
]

logger = logging.getLogger(__name__)

#: Seconds the caller waits past a deadline for the model's own timeout report (it checks between tokens).
REPORT_MARGIN = 0.5

#: What a backend hands a waiting caller: a chunk, None (the end) or the call's error.
Item = Chunk | BaseException | None


class PendingCall:
    """One call in flight, seen from its caller: what the sync and the async wait decide.

    The backend puts :data:`Item` s: a chunk, None at the end, or the call's error.
    :meth:`take` returns a chunk or the end (None), or raises the error; :meth:`waited` runs
    when nothing arrived within :meth:`wait_slice`.
    """

    __slots__ = (
        "attempts",
        "backend",
        "control",
        "done",
        "put",
        "reader",
        "request",
        "requeued",
        "rid",
        "started_output",
    )

    def __init__(self, backend: Backend, request: Request) -> None:
        self.backend = backend
        self.request = request
        # Its clock starts once the model is loaded (start_clock).
        self.control = CallControl(CallSpec.of(request.options, request.timeout, request.max_retries))
        self.reader = ReadWatch()  # whether the caller reads the stream (the scheduler's)
        self.put: Callable[[Item], None] = lambda item: None
        self.rid = 0
        self.done = False
        self.started_output = False  # a chunk was produced (the producer's side)
        self.attempts = 0  # new attempts after the worker died before output
        self.requeued = False  # sent again after the worker died while the call waited for it

    def wait_slice(self) -> float | None:
        """How long the caller blocks before it looks again (deadline, unread streams)."""
        return wait_slice(self.control)

    def waited(self) -> None:
        """Nothing arrived within a slice: time out past the deadline, else look at unread streams.

        Raises:
            GenerationTimeoutError: the caller's deadline passed.
        """
        if caller_deadline_passed(self.control):
            self.done = True
            raise self.backend.timed_out(self)
        self.backend.on_wait(self)

    def take(self, item: Item) -> Chunk | None:
        """The chunk, or None at the end.

        Raises:
            the call's error.
        """
        if isinstance(item, Chunk):
            self.control.tokens += len(item.token_ids)
            self.reader.handed()
            return item
        self.done = True
        if item is None:
            if self.reader.preempted:
                raise abandoned_error(self.control.tokens)
            return None
        raise item

    def may_retry(self, exc: BaseException) -> bool:
        """Whether a call whose worker died (``exc``) goes to a new worker (producer's side)."""
        if not isinstance(exc, WorkerDiedError) or self.started_output:
            return False
        if self.control.phase == Phase.QUEUED and not self.requeued:
            self.requeued = True  # it never started: not its own failure
            return True
        retries = self.control.spec.max_retries
        if self.attempts < retries:
            self.attempts += 1
            logger.warning("%s; sending the call again (%d of %d)", exc, self.attempts, retries)
            return True
        return False


def next_item(q: queue.SimpleQueue[Item], call: PendingCall) -> Item:
    """The next item of a call's queue, waited for with the call's deadline (the sync wait)."""
    call.reader.reading()
    while True:
        try:
            return q.get(timeout=call.wait_slice())
        except queue.Empty:
            call.waited()


async def anext_item(aq: asyncio.Queue[Item], call: PendingCall) -> Item:
    """Async twin of :func:`next_item`."""
    call.reader.reading()
    while True:
        if not aq.empty():
            return aq.get_nowait()
        # Not asyncio.wait_for: it can return the item (and swallow the cancellation) when the
        # task is cancelled just as the item arrives. asyncio.wait raises CancelledError then;
        # a get cancelled before it took its item leaves the item in the queue.
        getter = asyncio.ensure_future(aq.get())
        try:
            done, _ = await asyncio.wait((getter,), timeout=call.wait_slice())
        finally:
            if not getter.done():
                getter.cancel()
        if done:
            return getter.result()
        call.waited()


class Backend:
    """How a call is run and waited for; only the waits of :meth:`stream` and :meth:`astream` differ.

    A backend implements ``ensure_loaded`` (the one-time load, outside every timeout),
    ``launch`` (start the call; its items go to ``call.put``), ``on_wait``, ``timed_out``,
    ``orphan`` (nobody reads the call any more) and ``finish`` (the caller is done with it).
    """

    def ensure_loaded(self) -> None:
        """Load the model (once, outside every timeout)."""
        raise NotImplementedError

    def launch(self, call: PendingCall) -> None:
        """Start a call; its items go to ``call.put``."""
        raise NotImplementedError

    def precheck(self, request: Request) -> None:
        """Refuse a request that cannot run before anything is loaded for it."""

    def on_wait(self, call: PendingCall) -> None:
        """Nothing arrived within a slice (and the deadline has not passed)."""

    def timed_out(self, call: PendingCall) -> GenerationTimeoutError:
        """Stop a call that ran out of time; the error its caller raises."""
        raise NotImplementedError

    def orphan(self, call: PendingCall) -> None:
        """Nobody reads the call any more (its event loop closed): stop it."""
        raise NotImplementedError

    def finish(self, call: PendingCall) -> None:
        """The caller is done with a call (its end, an error, or it left): free it."""
        raise NotImplementedError

    def start(self, call: PendingCall) -> None:
        """Start a call once its model is loaded: its clock starts now (the load is no part of its time)."""
        call.control.start_clock()
        self.launch(call)

    def stream(self, request: Request) -> Generator[Chunk, None, None]:
        """Run ``request``; its chunks as they come (the sync wait)."""
        q: queue.SimpleQueue[Item] = queue.SimpleQueue()
        call = PendingCall(self, request)
        call.put = q.put
        try:
            self.precheck(request)
            self.ensure_loaded()
            self.start(call)
            while (chunk := call.take(next_item(q, call))) is not None:
                yield chunk
        finally:
            self.finish(call)

    async def astream(self, request: Request) -> AsyncGenerator[Chunk, None]:
        """Async twin of :meth:`stream`."""
        loop = asyncio.get_running_loop()
        aq: asyncio.Queue[Item] = asyncio.Queue()
        call = PendingCall(self, request)

        def put(item: Item) -> None:
            try:
                loop.call_soon_threadsafe(aq.put_nowait, item)
            except RuntimeError:  # the caller's event loop is closed: nobody reads this call
                self.orphan(call)

        call.put = put
        try:
            self.precheck(request)
            await loop.run_in_executor(None, self.ensure_loaded)
            self.start(call)
            while (chunk := call.take(await anext_item(aq, call))) is not None:
                yield chunk
        finally:
            self.finish(call)


def caller_deadline(control: CallControl) -> float | None:
    """When the caller stops waiting for a call.

    The deadline, plus a margin once the model works on the call (it reports its own timeout
    between tokens); a queued call cannot report, so it gets no margin.
    """
    deadline = control.deadline  # read once: a resent call's is put aside while a new worker loads
    if deadline is None:
        return None
    return deadline + (0.0 if control.phase == Phase.QUEUED else REPORT_MARGIN)


def wait_slice(control: CallControl) -> float | None:
    """How long a waiting caller blocks before it looks again (deadline, unread streams)."""
    deadline = caller_deadline(control)
    remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
    if control.phase != Phase.QUEUED:
        return remaining
    poll = scheduler.QUEUED_POLL  # the scheduler's look at unread streams, from the caller's side
    return poll if remaining is None else min(remaining, poll)


def caller_deadline_passed(control: CallControl) -> bool:
    """Whether the caller's deadline (see :func:`caller_deadline`) has passed."""
    deadline = caller_deadline(control)
    return deadline is not None and time.monotonic() >= deadline
