"""The one object the adapters talk to: :class:`Engine`.

    Engine.get(model, provider=..., execution=...)      one per (folder, provider, threads, release);
                                                        one per NPU model (see Engine.get)
      .stream(messages, options)   -> Iterator[Chunk]    sync
      .astream(messages, options)  -> AsyncIterator[Chunk]
      .generate / .agenerate       -> Completion         aggregates of the stream
      .count_tokens / .encode / .decode / .render

Execution:
- ``"process"`` (default): the model lives in a worker process
  (:mod:`ryzenai_core.worker`). onnxruntime-genai holds the GIL during prefill and decode;
  in a separate process that cannot freeze the caller's threads or asyncio loop, and a
  runtime crash becomes an error for the calls in flight while the next call starts a
  fresh worker.
- ``"inline"``: the model lives in this process (debugging, micro-benchmarks). Async calls
  then run on a thread and the event loop stalls while the runtime holds the GIL.

Set the default with the ``RYZENAI_LLM_EXECUTION`` environment variable.
"""

from __future__ import annotations

import asyncio
import atexit
import collections
import dataclasses
import itertools
import json
import logging
import math
import os
import queue
import select
import subprocess
import threading
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Generator, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from . import session as _session
from ._frames import (
    EMPTY,
    PARTIAL,
    PIPE_BUFFER,
    FramePipe,
    parse_frame,
    read_frame,
    read_frame_bytes,
    reap,
    write_frame,
)
from ._spawn import popen_worker
from .budget import ContextBudget
from .chat_template import ChatTemplate, PackageTemplates
from .errors import GenerationError, GenerationTimeoutError, InvalidRequestError, RyzenAIError, WorkerDiedError
from .hub import resolve_model
from .messages import ChatMessage, RawPrompt
from .options import GenerationOptions, check_runtime_settings
from .package import ModelPackage
from .request import Request
from .session import CallControl, Session, SessionKey, abandoned_error
from .streaming import Chunk

__all__ = ["Completion", "Engine", "Execution", "aggregate"]

Execution = Literal["process", "inline"]
ENV_EXECUTION = "RYZENAI_LLM_EXECUTION"
logger = logging.getLogger(__name__)


@dataclass
class Completion(Chunk):
    """A whole answer: the aggregate of a stream (the fields of a :class:`Chunk`)."""

    def add(self, chunk: Chunk) -> None:
        """Fold one chunk in."""
        self.text += chunk.text
        self.reasoning += chunk.reasoning
        self.tool_calls.extend(chunk.tool_calls)
        self.token_ids.extend(chunk.token_ids)
        if chunk.finish_reason is not None:
            self.finish_reason = chunk.finish_reason
            self.usage, self.timings, self.plan = chunk.usage, chunk.timings, chunk.plan
            self.dropped_messages, self.stop_sequence = chunk.dropped_messages, chunk.stop_sequence
            self.provider = chunk.provider


def aggregate(chunks: Iterator[Chunk]) -> Completion:
    """Fold a stream into a :class:`Completion`."""
    out = Completion()
    for chunk in chunks:
        out.add(chunk)
    return out


# ---------------------------------------------------------------------- backends
#: Seconds the caller waits past a deadline for the model's own timeout report (it checks between tokens).
REPORT_MARGIN = 0.5
#: Seconds a worker may take to stop a call that ran out of time before it is replaced by a new one.
STUCK_GRACE = float(os.environ.get("RYZENAI_LLM_STUCK_GRACE", "10"))
_POLL = 0.25  # seconds between looks at unread streams while a call waits for the model
#: Seconds a new worker process may take to start and open the package (not to load the model).
START_TIMEOUT = float(os.environ.get("RYZENAI_LLM_START_TIMEOUT", "120"))
#: Whether a sync stream that is the only call in flight reads the worker's pipe in its own
#: thread (POSIX, which can poll a pipe): each token then wakes one thread of the caller instead
#: of two. Elsewhere (Windows) the reader thread hands every frame over.
DIRECT_READ = os.name == "posix" and hasattr(select, "poll")
#: Seconds a stream that reads for itself may leave the pipe unread (its consumer busy between
#: two chunks) before the reader thread takes it back.
AWAY = 0.1


def _read_first_frame(proc: subprocess.Popen[bytes]) -> Any:
    """The worker's first frame.

    None if it exits or tears it, "silent" if it sends nothing within :data:`START_TIMEOUT`
    seconds (it is killed then).
    """
    assert proc.stdout is not None
    stdout = proc.stdout
    got: list[Any] = []

    def read() -> None:
        try:
            got.append(read_frame(stdout))
        except Exception:  # noqa: BLE001 - a torn frame
            got.append(None)

    reader = threading.Thread(target=read, daemon=True, name="ryzenai-worker-start")
    reader.start()
    reader.join(START_TIMEOUT)
    if reader.is_alive():
        logger.warning("the model worker (pid %s) sent nothing within %s s; stopping it", proc.pid, START_TIMEOUT)
        proc.kill()
        reader.join(10)
        return "silent"
    return got[0] if got else None


class _Pending:
    """One call in flight, seen from its caller: what the sync and the async wait decide.

    The backend puts items ``(kind, value)``: ``("chunk", Chunk)``, ``("end", None)`` or
    ``("error", exception)``. :meth:`take` turns an item into a chunk, the end (None) or
    an exception; :meth:`waited` runs when nothing arrived within :meth:`wait_slice`.
    """

    __slots__ = (
        "attempts",
        "backend",
        "control",
        "done",
        "put",
        "reads_itself",
        "request",
        "requeued",
        "rid",
        "started_output",
    )

    def __init__(self, backend: _Backend, request: Request) -> None:
        self.backend = backend
        self.request = request
        self.control = CallControl(timeout=request.timeout)
        self.control.budget_name = request.options.called("max_new_tokens")
        self.control.deadline = None  # the clock starts once the model is loaded
        self.put: Callable[[tuple[str, Any]], None] = lambda item: None
        self.rid = 0
        self.done = False
        self.started_output = False  # a chunk was produced (the producer's side)
        self.attempts = 0  # new attempts after the worker died before output
        self.requeued = False  # sent again after the worker died while the call waited for it
        self.reads_itself = False  # a sync stream that may read the worker's pipe itself while alone

    def wait_slice(self) -> float | None:
        """How long the caller blocks before it looks again (deadline, unread streams)."""
        return _wait_slice(self.control)

    def waited(self) -> None:
        """Nothing arrived within a slice: time out past the deadline, else look at unread streams.

        Raises:
            GenerationTimeoutError: the caller's deadline passed.
        """
        if _caller_deadline_passed(self.control):
            self.done = True
            raise self.backend.timed_out(self)
        self.backend.on_wait(self)

    def take(self, item: tuple[str, Any]) -> Chunk | None:
        """The chunk an item carries, or None at the end.

        Raises:
            the call's error.
        """
        kind, value = item
        if kind == "chunk":
            self.control.tokens += len(value.token_ids)
            self.control.idle_since = time.monotonic()
            return value  # type: ignore[no-any-return]
        self.done = True
        if kind == "end":
            if self.control.preempted:
                raise abandoned_error(self.control.tokens)
            return None
        raise value

    def may_retry(self, exc: BaseException) -> bool:
        """Whether a call whose worker died (``exc``) goes to a new worker (producer's side)."""
        if not isinstance(exc, WorkerDiedError) or self.started_output:
            return False
        if self.control.phase == "queued" and not self.requeued:
            self.requeued = True  # it never started: not its own failure
            return True
        if self.attempts < self.request.max_retries:
            self.attempts += 1
            logger.warning("%s; sending the call again (%d of %d)", exc, self.attempts, self.request.max_retries)
            return True
        return False


def _get(q: queue.SimpleQueue[tuple[str, Any]], call: _Pending) -> tuple[str, Any]:
    call.control.idle_since = None
    while True:
        try:
            return q.get(timeout=call.wait_slice())
        except queue.Empty:
            call.waited()


async def _aget(aq: asyncio.Queue[tuple[str, Any]], call: _Pending) -> tuple[str, Any]:
    call.control.idle_since = None
    while True:
        try:
            return await asyncio.wait_for(aq.get(), call.wait_slice())
        except asyncio.TimeoutError:
            call.waited()


class _Backend:
    """How a call is run and waited for; only the waits of :meth:`stream` and :meth:`astream` differ.

    A backend implements ``ensure_loaded`` (the one-time load, outside every timeout),
    ``launch`` (start the call; its items go to ``call.put``), ``on_wait``, ``timed_out``,
    ``orphan`` (nobody reads the call any more) and ``finish`` (the caller is done with it).
    """

    def ensure_loaded(self) -> None:
        raise NotImplementedError

    def launch(self, call: _Pending) -> None:
        raise NotImplementedError

    def on_wait(self, call: _Pending) -> None:
        """Nothing arrived within a slice (and the deadline has not passed)."""

    def timed_out(self, call: _Pending) -> GenerationTimeoutError:
        raise NotImplementedError

    def orphan(self, call: _Pending) -> None:
        raise NotImplementedError

    def finish(self, call: _Pending) -> None:
        raise NotImplementedError

    def stream(self, request: Request) -> Generator[Chunk, None, None]:
        q: queue.SimpleQueue[tuple[str, Any]] = queue.SimpleQueue()
        call = _Pending(self, request)
        call.put = q.put
        try:
            self.ensure_loaded()
            call.control.start_clock()
            self.launch(call)
            while (chunk := call.take(_get(q, call))) is not None:
                yield chunk
        finally:
            self.finish(call)

    async def astream(self, request: Request) -> AsyncGenerator[Chunk, None]:
        loop = asyncio.get_running_loop()
        aq: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
        call = _Pending(self, request)

        def put(item: tuple[str, Any]) -> None:
            try:
                loop.call_soon_threadsafe(aq.put_nowait, item)
            except RuntimeError:  # the caller's event loop is closed: nobody reads this call
                self.orphan(call)

        call.put = put
        try:
            await loop.run_in_executor(None, self.ensure_loaded)
            call.control.start_clock()
            self.launch(call)
            while (chunk := call.take(await _aget(aq, call))) is not None:
                yield chunk
        finally:
            self.finish(call)


class _InlineBackend(_Backend):
    """The model in this process.

    A sync stream without a timeout runs in the caller's thread: there is no deadline to watch
    while the model works, and no hand-over per token. Every other call runs its generation on
    a thread of its own, so every wait has a deadline and an event loop is never blocked.
    """

    def __init__(self, key: SessionKey) -> None:
        self.session = Session(key)

    def call(self, method: str, *args: Any, timeout: float | None = None) -> Any:
        if method == "load":
            self.session.load()
            return self.session.load_seconds
        return getattr(self.session, method)(*args)

    def ensure_loaded(self) -> None:
        self.session.load()

    def stream(self, request: Request) -> Generator[Chunk, None, None]:
        if request.timeout is not None:
            yield from super().stream(request)
            return
        control = CallControl()
        control.budget_name = request.options.called("max_new_tokens")
        chunks = self.session.stream(request.messages, request.options, control)
        kept: collections.deque[Chunk] = collections.deque()
        failed: list[Exception] = []

        def drain() -> None:
            """Another call in this thread needs the model while this stream is paused."""
            control.drain = None
            try:
                kept.extend(chunks)
            except Exception as exc:  # noqa: BLE001 - raised to this stream's reader, in order
                failed.append(exc)

        control.drain = drain
        try:
            while True:
                if kept:
                    yield kept.popleft()
                elif failed:
                    raise failed.pop()
                elif control.drain is None:
                    return  # drained to its end
                else:
                    try:
                        chunk = next(chunks)
                    except StopIteration:
                        return
                    yield chunk
        finally:
            control.drain = None
            chunks.close()

    def launch(self, call: _Pending) -> None:
        # A stream paused in this thread that holds the model could not resume while this call
        # waits for it: it runs to its end first (its chunks kept for its reader).
        self.session.drain_paused_holder()
        request, put = call.request, call.put

        def produce() -> None:
            try:
                for chunk in self.session.stream(request.messages, request.options, call.control):
                    put(("chunk", chunk))
                put(("end", None))
            except BaseException as exc:  # noqa: BLE001 - every failure goes to the caller
                put(("error", exc))

        threading.Thread(target=produce, daemon=True, name="ryzenai-inline-generation").start()

    def timed_out(self, call: _Pending) -> GenerationTimeoutError:
        call.control.cancel.set()
        return call.control.timeout_error()

    def orphan(self, call: _Pending) -> None:
        call.control.cancel.set()

    def finish(self, call: _Pending) -> None:
        if not call.done:
            call.control.cancel.set()

    def close(self) -> None:
        self.session.reset_cache()


def _caller_deadline(control: CallControl) -> float | None:
    """When the caller stops waiting for a call.

    The deadline, plus a margin once the model works on the call (it reports its own timeout
    between tokens); a queued call cannot report, so it gets no margin.
    """
    deadline = control.deadline  # read once: a resent call's is put aside while a new worker loads
    if deadline is None:
        return None
    return deadline + (0.0 if control.phase == "queued" else REPORT_MARGIN)


def _wait_slice(control: CallControl) -> float | None:
    """How long a waiting caller blocks before it looks again (deadline, unread streams)."""
    deadline = _caller_deadline(control)
    remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
    if control.phase != "queued":
        return remaining
    return _POLL if remaining is None else min(remaining, _POLL)


def _caller_deadline_passed(control: CallControl) -> bool:
    deadline = _caller_deadline(control)
    return deadline is not None and time.monotonic() >= deadline


_WOKEN = "woken"  # the reader thread left its turn for a stream that reads for itself
_MINE, _OTHER, _TIMEOUT = 0, 1, 2  # what a stream's turn on the pipe found (_WorkerBackend._read_own)
_OWN_POLL = 1.0  # seconds a stream reading for itself waits on the pipe before it looks at its queue again
_AT_PIPE = math.inf  # _Link.left while the owner is at the pipe: never away


class _Link:
    """The reading end of one worker's stdout, and whose turn it is to read it.

    The reader thread reads every frame and hands each to its call, except while a sync stream
    is the only call in flight (:data:`DIRECT_READ`): that stream's own thread then reads its
    frames (the reader thread waits on ``cond``), so a token wakes one thread instead of two.
    Whoever polls or reads holds ``turn``; ``owner`` is the stream reading for itself.
    """

    def __init__(self, proc: subprocess.Popen[bytes], direct: bool) -> None:
        assert proc.stdout is not None
        self.proc = proc
        self.turn = threading.Lock()
        self.cond = threading.Condition()  # guards owner and closed
        self.owner: int | None = None
        self.left = 0.0  # when the owner last left the pipe for its consumer
        self.closed = False
        self.torn = False
        self.pipe: FramePipe | None = None
        if direct:
            self.pipe = FramePipe(proc.stdout)  # type: ignore[arg-type]
            self.wake_r, self.wake_w = os.pipe()  # wakes the reader thread from its poll
            os.set_blocking(self.wake_r, False)
            os.set_blocking(self.wake_w, False)
            self.poller = select.poll()  # the reader thread's: the pipe and its wake-up
            self.poller.register(self.pipe.fd, select.POLLIN)
            self.poller.register(self.wake_r, select.POLLIN)
            self.own_poller = select.poll()  # the owner's: the pipe
            self.own_poller.register(self.pipe.fd, select.POLLIN)

    def wake_reader(self) -> None:
        """Wake the reader thread from its poll (under ``cond``)."""
        if self.pipe is not None and not self.closed:
            try:
                os.write(self.wake_w, b"x")
            except BlockingIOError:  # already plenty of wake-ups waiting
                pass

    def drain_wakes(self) -> None:
        try:
            os.read(self.wake_r, 4096)
        except BlockingIOError:
            pass

    def close(self) -> None:
        """Close the wake-up pipe (after the worker's pipe ended, under ``cond``'s closed)."""
        if self.pipe is not None:
            with self.cond:
                for fd in (self.wake_r, self.wake_w):
                    os.close(fd)
                self.pipe = None


class _WorkerBackend(_Backend):
    """Talks to a worker process; restarts it on the next call after it died.

    A call that runs out of its timeout is cancelled; if the worker does not finish it
    within :data:`STUCK_GRACE` seconds (a call stuck outside the token loop), the worker is
    replaced, so the model is usable again. Calls that were still waiting in its queue are
    sent to the new worker.

    Frames from the worker are read by a reader thread and handed to their calls, except that a
    sync stream that is the only call in flight reads its own (see :class:`_Link`): it takes the
    pipe before its request goes, gives it back to the reader thread when another call starts,
    when a frame is not its own or not all there yet, or when its consumer leaves the pipe
    unread for :data:`AWAY` seconds.
    """

    def __init__(self, key: SessionKey) -> None:
        self.key = key
        self._proc: subprocess.Popen[bytes] | None = None
        self._link: _Link | None = None  # the reading end of the worker's pipe
        self.direct_read = DIRECT_READ  # for a worker started from now on
        self._start_lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._handlers: dict[int, Callable[[tuple[Any, ...]], None]] = {}
        self._sent_to: dict[int, int] = {}  # request id -> pid of the worker it was sent to
        self._streams: dict[int, CallControl] = {}  # open streams, oldest first
        self._running: int | None = None  # the stream the worker is working on
        self._loaded_pid: int | None = None
        self._ids = itertools.count(1)
        self._closed = False

    # -- process management
    def _ensure(self) -> subprocess.Popen[bytes]:
        with self._start_lock:
            proc = self._proc
            if proc is not None and proc.poll() is None:
                return proc
            if self._closed:  # a call still in flight (a resend) after close(): no new worker
                raise WorkerDiedError("the engine was closed during the call")
            proc = popen_worker("ryzenai_core.worker", bufsize=PIPE_BUFFER)
            assert proc.stdin is not None and proc.stdout is not None
            try:
                write_frame(proc.stdin, ("init", self.key), self._write_lock)
            except OSError:  # it exited before reading
                pass
            ready = _read_first_frame(proc)
            if ready != ("ready",):
                code = reap(proc, timeout=10)
                if isinstance(ready, tuple) and ready[0] == "failed":
                    raise ready[1]  # the session could not start (a package that broke since): its own error
                if ready == "silent":
                    raise GenerationError(
                        f"the model worker did not start within {START_TIMEOUT:g} s (RYZENAI_LLM_START_TIMEOUT) "
                        "and was stopped; see its stderr above. A machine under heavy load may need more: "
                        "raise RYZENAI_LLM_START_TIMEOUT"
                    )
                raise GenerationError(f"the model worker failed to start (exit code {code}); see its stderr above")
            link = _Link(proc, self.direct_read)
            self._proc, self._link = proc, link
            threading.Thread(target=self._read, args=(link,), daemon=True, name="ryzenai-worker-reader").start()
            return proc

    def ensure_loaded(self) -> None:
        """Load the model in the worker before a timed call (the load is not part of any timeout)."""
        proc = self._ensure()
        if self._loaded_pid != proc.pid:
            self.call("load")
            self._loaded_pid = proc.pid

    def _read(self, link: _Link) -> None:
        """The reader thread: reads and hands over every frame, except while a stream reads for itself."""
        try:
            while True:
                with link.cond:
                    while link.owner is not None and not link.closed:
                        if not link.cond.wait(AWAY) and link.owner is not None and not link.turn.locked():
                            if time.monotonic() - link.left >= AWAY:
                                link.owner = None  # its consumer is busy elsewhere: frames must not wait for it
                    if link.closed:
                        break
                with link.turn:
                    if link.owner is not None:
                        continue
                    msg = self._next_frame(link)
                    if msg is _WOKEN:
                        continue
                    if msg is None:
                        break
                    self._dispatch(msg)
        finally:
            self._died(link)

    def _next_frame(self, link: _Link) -> Any:
        """The next message (the reader thread's turn): None at the end, _WOKEN when a stream claims the pipe."""
        proc, pipe = link.proc, link.pipe
        if link.torn:  # a stream found a torn frame (and killed the worker)
            return None
        try:
            if pipe is None:  # a blocking pipe (Windows)
                assert proc.stdout is not None
                data = read_frame_bytes(proc.stdout)
                return None if data is None else parse_frame(data)
            head = EMPTY if pipe.drained else pipe.head()  # nothing buffered: wait before looking
            if head is EMPTY:
                if any(fd == link.wake_r for fd, _ in link.poller.poll()):
                    link.drain_wakes()
                    return _WOKEN
                head = pipe.head()
                if head is EMPTY:
                    return None  # readable and empty: the worker closed its end
            if head is PARTIAL:
                data = pipe.read_whole()
                return None if data is None else parse_frame(data)
            assert not isinstance(head, str)
            msg = parse_frame(head[1])
            pipe.consume(head[0])
            return msg
        except Exception:  # noqa: BLE001 - a torn frame: nothing after it can be trusted
            proc.kill()
            return None

    def _dispatch(self, msg: tuple[Any, ...]) -> None:
        """Hand a message from the worker to its call (whoever holds the pipe's turn)."""
        kind = msg[0]
        if kind == "delta":  # the compact frame of a text-only chunk (see worker.py)
            msg = ("chunk", msg[1], Chunk(text=msg[2], token_ids=msg[3]))
        elif kind == "phase":
            self._running = msg[1]
            control = self._streams.get(msg[1])
            if control is not None:
                control.phase = msg[2]
            return
        elif kind in ("end", "error") and self._running == msg[1]:
            self._running = None
        handler = self._handlers.get(msg[1])
        if handler is not None:
            handler(msg)

    def _died(self, link: _Link) -> None:
        """The worker's pipe ended (it exited, was killed or closed, or tore a frame): fail its calls."""
        proc = link.proc
        with link.cond:
            link.closed = True
            link.owner = None
            link.cond.notify_all()
        with link.turn:  # a stream in its turn finishes it first
            code = reap(proc)
            link.close()
        if self._running is not None and self._sent_to.get(self._running) == proc.pid:
            self._running = None
        err = WorkerDiedError(
            f"the model worker process (pid {proc.pid}) exited with code {code} during the call; "
            "the next call starts a new worker"
        )
        for rid, handler in list(self._handlers.items()):
            if self._sent_to.get(rid) == proc.pid:
                handler(("error", rid, err))

    # -- a stream that reads for itself
    def _take_pipe(self, link: _Link, rid: int) -> bool:
        """Make stream ``rid`` the pipe's owner if it is the only call in flight (the reader thread then waits)."""
        with link.cond:
            alone = len(self._handlers) == 1 and rid in self._handlers
            if link.pipe is None or link.closed or link.torn or link.owner is not None or not alone:
                return False
            link.owner = rid
            link.left = time.monotonic()
            link.wake_reader()
            return True

    def _claim(self, link: _Link, rid: int) -> bool:
        """Make stream ``rid`` the pipe's reader (its owner, or alone now); False if it is not.

        From here until the stream leaves the pipe's turn, the reader thread does not take the
        pipe back (else it could wait on the pipe holding the turn while the stream waits for
        the turn, its last frames already in its queue).
        """
        if link.owner != rid and not self._take_pipe(link, rid):
            return False
        link.left = _AT_PIPE
        return True

    def _step_back(self, link: _Link, rid: int) -> None:
        """Stream ``rid`` stops reading for itself: the reader thread reads again."""
        with link.cond:
            if link.owner == rid:
                link.owner = None
                link.cond.notify_all()

    def _read_own(self, link: _Link, call: _Pending) -> tuple[str, Any] | int:
        """One turn of stream ``call`` on the pipe: the item of a frame of its own, _MINE, _TIMEOUT or _OTHER.

        A text frame of its own comes back as its item (the common case: no hand-over through
        the queue); any other frame of its own is dispatched (_MINE: its item, if any, is in the
        queue). _OTHER: the reader thread should read what comes (a frame for another call, a
        frame still arriving, a torn frame or the pipe's end; or the reader took the pipe back).
        Only frames of its own are consumed here: a KeyboardInterrupt in this thread can lose at
        most one of those, with the stream it ends.
        """
        pipe = link.pipe
        assert pipe is not None
        rid = call.rid
        polled = False
        while link.owner == rid:
            if pipe.drained and not polled:  # nothing buffered: wait on the pipe before looking
                # At most a second at a time: what reaches the queue other than through the pipe is seen within it.
                timeout = call.wait_slice()
                wait = max(1, math.ceil(min(timeout if timeout is not None else _OWN_POLL, _OWN_POLL) * 1000))
                if not link.own_poller.poll(wait):
                    return _TIMEOUT
                polled = True
            try:
                head = pipe.head()
            except (OSError, ValueError):  # closed under us
                return _OTHER
            except Exception:  # noqa: BLE001 - a torn frame: nothing after it can be trusted
                link.proc.kill()
                link.torn = True
                return _OTHER
            if head is EMPTY:
                if polled:
                    return _OTHER  # readable and empty: the pipe's end
                pipe.drained = True  # nothing buffered, nothing to read now: wait above
                continue
            if head is PARTIAL:
                return _OTHER  # the reader thread, which no signal interrupts, waits for the rest
            assert not isinstance(head, str)
            try:
                msg = parse_frame(head[1])
            except Exception:  # noqa: BLE001 - a torn frame: nothing after it can be trusted
                link.proc.kill()
                link.torn = True
                return _OTHER
            if msg[1] != rid and msg[1] in self._handlers:
                return _OTHER
            try:
                pipe.consume(head[0])
            except (OSError, ValueError):  # closed under us
                return _OTHER
            if msg[0] == "delta" and msg[1] == rid:  # a middle chunk (see worker.py): straight to the stream
                call.started_output = True
                return ("chunk", Chunk(text=msg[2], token_ids=msg[3]))
            self._dispatch(msg)
            return _MINE
        return _OTHER

    def _wait_own(self, q: queue.SimpleQueue[tuple[str, Any]], call: _Pending) -> tuple[str, Any]:
        """The next item of a sync stream: read from the pipe by its own thread while it is alone."""
        call.control.idle_since = None
        rid = call.rid
        while True:
            if not q.empty():
                return q.get_nowait()
            link = self._link
            if link is None or link.pipe is None or link.proc is not self._proc or not self._claim(link, rid):
                return _get(q, call)
            # The turn is taken by `with`: its release is in place before a Ctrl-C in this thread
            # can be raised (an acquire() followed by a try could leave it held: every call hangs).
            with link.turn:
                try:
                    if link.owner != rid:  # the reader thread took the pipe back
                        got: tuple[str, Any] | int = _OTHER
                    elif not q.empty():
                        # Frames are handed over only by whoever holds the turn: one the reader thread
                        # handed over before this stream took it is in the queue now.
                        got = _MINE
                    else:
                        got = self._read_own(link, call)
                finally:
                    link.left = time.monotonic()
            if type(got) is tuple:
                return got
            if got == _TIMEOUT:
                call.waited()
            elif got == _OTHER:
                self._step_back(link, rid)
                return _get(q, call)

    def stream(self, request: Request) -> Generator[Chunk, None, None]:
        q: queue.SimpleQueue[tuple[str, Any]] = queue.SimpleQueue()
        call = _Pending(self, request)
        call.put = q.put
        call.reads_itself = True
        try:
            self.ensure_loaded()
            call.control.start_clock()
            self.launch(call)
            while (chunk := call.take(self._wait_own(q, call))) is not None:
                yield chunk
        finally:
            self.finish(call)

    def _send(self, message: tuple[Any, ...]) -> None:
        proc = self._ensure()
        assert proc.stdin is not None
        if message[0] in ("stream", "call"):
            self._sent_to[message[1]] = proc.pid
        try:
            write_frame(proc.stdin, message, self._write_lock)
        except (BrokenPipeError, OSError) as exc:
            raise WorkerDiedError(
                f"the model worker process (pid {proc.pid}) is gone ({exc}); the next call starts a new worker"
            ) from exc

    def _register(self, handler: Callable[[tuple[Any, ...]], None]) -> int:
        rid = next(self._ids)
        link = self._link
        if link is None:
            self._handlers[rid] = handler
            return rid
        with link.cond:  # a stream reading for itself is no longer alone: the reader thread reads for both
            self._handlers[rid] = handler
            if link.owner is not None:
                link.owner = None
                link.cond.notify_all()
        return rid

    def _forget(self, rid: int) -> None:
        self._handlers.pop(rid, None)
        self._sent_to.pop(rid, None)
        self._streams.pop(rid, None)
        link = self._link
        if link is not None and link.owner == rid:
            self._step_back(link, rid)

    # -- calls
    def call(self, method: str, *args: Any, timeout: float | None = None) -> Any:
        q: queue.SimpleQueue[tuple[Any, ...]] = queue.SimpleQueue()
        rid = self._register(q.put)
        try:
            self._send(("call", rid, method, args))
            try:
                msg = q.get(timeout=timeout)
            except queue.Empty:
                raise GenerationTimeoutError(f"{method} took longer than timeout={timeout} s", phase=method) from None
        finally:
            self._forget(rid)
        if msg[0] == "error":
            raise msg[2]
        return msg[2]

    def launch(self, call: _Pending) -> None:
        if not call.rid:

            def handler(msg: tuple[Any, ...]) -> None:
                kind = msg[0]
                if kind == "chunk":
                    call.started_output = True
                    call.put(("chunk", msg[2]))
                elif kind == "end":
                    call.put(("end", None))
                elif not self._closed and call.may_retry(msg[2]):  # a closed engine starts no new worker
                    threading.Thread(target=self._resend, args=(call,), daemon=True).start()
                else:
                    call.put(("error", msg[2]))

            call.rid = self._register(handler)
        control, request = call.control, call.request
        control.phase = "queued"
        self._streams[call.rid] = control
        messages = request.messages if isinstance(request.messages, RawPrompt) else list(request.messages)
        if call.reads_itself and (link := self._link) is not None:
            self._take_pipe(link, call.rid)  # before the request goes: every frame of the answer is its own to read
        self._send(("stream", call.rid, messages, request.options, control.timeout))

    def _resend(self, call: _Pending) -> None:
        """Send a call whose worker died before any output to a new worker (unless its caller left)."""
        if call.rid not in self._handlers:
            return
        control = call.control
        # Loading the model in the new worker is no part of the call's time (as on a first call).
        # "queued" first: the caller then looks again every _POLL seconds, so it sees the
        # deadline come back (it would otherwise block without one).
        control.phase = "queued"
        held, control.deadline = control.deadline, None
        started = time.monotonic()
        try:
            try:
                self.ensure_loaded()
            finally:
                if held is not None:
                    control.deadline = held + (time.monotonic() - started)
            if call.rid in self._handlers:  # its caller may have left during the load
                # Its thread waits on its queue now, so the reader thread reads for it until it
                # comes back to the pipe (taking the pipe here would leave it unread for AWAY s).
                call.reads_itself = False
                self.launch(call)
        except BaseException as exc:  # noqa: BLE001 - the caller gets why the new worker failed
            call.put(("error", exc))

    def on_wait(self, call: _Pending) -> None:
        """A waiting call looks at the streams ahead of it: one nobody reads is stopped."""
        if call.control.phase != "queued":
            return
        now = time.monotonic()
        for other_rid, other in list(self._streams.items()):
            if other_rid >= call.rid:
                break
            idle = other.idle_since
            if (
                not other.preempted
                and other.phase != "queued"
                and idle is not None
                and now - idle >= _session.ABANDON_AFTER
            ):
                other.preempted = True
                self._cancel(other_rid)

    def timed_out(self, call: _Pending) -> GenerationTimeoutError:
        """Cancel a call that ran out of time; replace the worker if it cannot stop it."""
        self._cancel(call.rid)
        if call.control.phase != "queued":
            timer = threading.Timer(STUCK_GRACE, self._replace_if_stuck, args=(call.rid, self._proc))
            timer.daemon = True
            timer.start()
        return call.control.timeout_error()

    def _replace_if_stuck(self, rid: int, proc: subprocess.Popen[bytes] | None) -> None:
        if proc is not None and self._running == rid and proc.poll() is None:
            logger.warning(
                "the model worker (pid %s) did not stop a call that ran out of time within %s s; replacing it",
                proc.pid,
                STUCK_GRACE,
            )
            proc.kill()

    def orphan(self, call: _Pending) -> None:
        self._handlers.pop(call.rid, None)
        self._cancel(call.rid)

    def finish(self, call: _Pending) -> None:
        if call.rid:
            self._forget(call.rid)
            if not call.done:
                self._cancel(call.rid)

    def _cancel(self, rid: int) -> None:
        """Tell the worker to stop a call; a worker that is gone has nothing to stop (none is started for it)."""
        proc = self._proc
        if proc is None or proc.poll() is not None:
            return
        assert proc.stdin is not None
        try:
            write_frame(proc.stdin, ("cancel", rid), self._write_lock)
        except OSError:
            pass

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None and self._proc.poll() is None else None

    def close(self) -> None:
        self._closed = True  # calls still in flight fail; none is sent to a new worker
        proc, self._proc = self._proc, None
        link, self._link = self._link, None
        if link is not None:
            with link.cond:  # the reader thread, if it waits for a stream, ends the link now
                link.closed = True
                link.owner = None
                link.cond.notify_all()
        if proc is not None:
            reap(proc, timeout=5)


# ---------------------------------------------------------------------- engine
def _folder_identity(name: str) -> tuple[int, int] | None:
    """(device, inode) of what ``name`` names in the file system (a symlink's target), None if nothing."""
    try:
        st = os.stat(name)
    except (OSError, ValueError):
        return None
    return (st.st_dev, st.st_ino)


def _npu_identity(key: SessionKey, package: ModelPackage, mode: str) -> tuple[Any, ...] | None:
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


class Engine:
    """A model package, ready to generate: see the module docstring.

    Use :meth:`get` to share one engine (and one loaded model) between all adapters that
    name the same folder, provider, thread count and release; on a Ryzen AI package run by its
    own provider, between all that differ only in thread count and in a release with the same
    budget.
    """

    _registry: dict[tuple[SessionKey, str], Engine] = {}
    #: how callers named a model (name and settings) -> the folder the name named then, and the registry key
    _asked: dict[tuple[Any, ...], tuple[tuple[int, int] | None, tuple[SessionKey, str]]] = {}
    #: Ryzen AI packages on their own provider: what decides a generation (see :func:`_npu_identity`) -> engine
    _npu: dict[tuple[Any, ...], Engine] = {}
    _registry_lock = threading.Lock()

    def __init__(self, key: SessionKey, execution: Execution, package: ModelPackage | None = None) -> None:
        if execution not in ("process", "inline"):
            raise InvalidRequestError(f"execution {execution!r} is not supported; use 'process' or 'inline'")
        self.key = key
        self.execution = execution
        self.package = package or ModelPackage.open(key.path, release=key.release)
        self._templates = PackageTemplates(self.package)
        self.template = self._templates.default
        self._backend: _InlineBackend | _WorkerBackend | None = None
        self._backend_lock = threading.Lock()

    @classmethod
    def get(
        cls,
        model: str | os.PathLike[str] | ModelPackage,
        *,
        provider: str | None = None,
        num_threads: int | None = None,
        release: str | None = None,
        execution: Execution | None = None,
        session_options: Mapping[str, Any] | None = None,
    ) -> Engine:
        """The shared engine for a model (created on first use, the model loaded lazily).

        ``model`` is a folder, an embedded model's name or a Hugging Face repository id
        (see :func:`~ryzenai_core.hub.resolve_model`). ``session_options`` are ONNX Runtime
        session options overlaid on the package's (``{"log_severity_level": 3}``, ...).
        """
        check_runtime_settings(provider, num_threads)
        mode = execution or os.environ.get(ENV_EXECUTION, "process")
        options = json.dumps(dict(session_options), sort_keys=True) if session_options else "{}"
        asked = folder = None
        if not isinstance(model, ModelPackage):
            # A call names its model the same way every time: remember where the name led, so
            # a call does not look the model up again, as long as the name still names the
            # same folder (or still none: an embedded model, a repository id, resolved once
            # per process).
            asked = (os.fspath(model), provider, num_threads, release, mode, options)
            folder = _folder_identity(asked[0])
            known = cls._asked.get(asked)
            if known is not None and known[0] == folder and (engine := cls._registry.get(known[1])) is not None:
                return engine
        path = model.path if isinstance(model, ModelPackage) else resolve_model(model)
        key = SessionKey(str(path.resolve()), provider, num_threads, release, options)
        with cls._registry_lock:
            engine = cls._registry.get((key, mode))
            if engine is None:
                package = ModelPackage.open(key.path, release=release)
                shared = _npu_identity(key, package, mode)
                engine = cls._npu.get(shared) if shared is not None else None
                if engine is None:
                    engine = cls(key, mode, package)  # type: ignore[arg-type]
                    if shared is not None:
                        cls._npu[shared] = engine
                else:
                    logger.info(
                        "%s: num_threads=%s, release=%s share the loaded model of num_threads=%s, release=%s "
                        "(the same generation on the NPU; the model is not loaded twice)",
                        package.name,
                        num_threads,
                        release,
                        engine.key.num_threads,
                        engine.key.release,
                    )
                cls._registry[(key, mode)] = engine
            if asked is not None:
                cls._asked[asked] = (folder, (key, mode))
            return engine

    @property
    def budget(self) -> ContextBudget:
        """The package's context budget."""
        return self.package.budget

    def template_for(self, chat_template: str | None = None) -> ChatTemplate:
        """The template a call with ``chat_template`` renders with (the package's when None)."""
        return self._templates.get(chat_template)

    @property
    def backend(self) -> _InlineBackend | _WorkerBackend:
        """The inline session or the worker connection (created on first use)."""
        with self._backend_lock:
            if self._backend is None:
                self._backend = _InlineBackend(self.key) if self.execution == "inline" else _WorkerBackend(self.key)
            return self._backend

    # -- generation
    def run(self, request: Request) -> Generator[Chunk, None, None]:
        """Stream the answer to ``request``; closing the iterator cancels the generation.

        A call whose worker process died before it produced output is sent to a new worker
        (up to ``request.max_retries`` times; a call that was still waiting is always resent).
        """
        return self.backend.stream(request)

    def arun(self, request: Request) -> AsyncGenerator[Chunk, None]:
        """Async twin of :meth:`run`; cancelling the task cancels the generation."""
        return self.backend.astream(request)

    def stream(
        self,
        messages: Sequence[ChatMessage] | RawPrompt,
        options: GenerationOptions | None = None,
        *,
        timeout: float | None = None,
    ) -> Iterator[Chunk]:
        """:meth:`run` of a request made of these parts."""
        return self.run(Request(messages, options or GenerationOptions(), timeout))

    def astream(
        self,
        messages: Sequence[ChatMessage] | RawPrompt,
        options: GenerationOptions | None = None,
        *,
        timeout: float | None = None,
    ) -> AsyncIterator[Chunk]:
        """:meth:`arun` of a request made of these parts."""
        return self.arun(Request(messages, options or GenerationOptions(), timeout))

    def generate(
        self,
        messages: Sequence[ChatMessage] | RawPrompt,
        options: GenerationOptions | None = None,
        *,
        timeout: float | None = None,
    ) -> Completion:
        """The whole answer (an aggregate of :meth:`stream`)."""
        return aggregate(self.stream(messages, options, timeout=timeout))

    async def agenerate(
        self,
        messages: Sequence[ChatMessage] | RawPrompt,
        options: GenerationOptions | None = None,
        *,
        timeout: float | None = None,
    ) -> Completion:
        """Async twin of :meth:`generate`."""
        out = Completion()
        async for chunk in self.astream(messages, options, timeout=timeout):
            out.add(chunk)
        return out

    # -- tokens
    def count_tokens(self, messages: Sequence[ChatMessage], options: GenerationOptions | None = None) -> int:
        """Prompt tokens of ``messages`` with the package's template and tokenizer."""
        return int(self.backend.call("count_tokens", list(messages), options or GenerationOptions()))

    def render(self, messages: Sequence[ChatMessage], options: GenerationOptions | None = None) -> str:
        """The prompt text for ``messages``."""
        return str(self.backend.call("render", list(messages), options or GenerationOptions()))

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text``."""
        return list(self.backend.call("encode", text))

    def count_text(self, text: str) -> int:
        """Tokens of ``text`` alone (no template, no special tokens added)."""
        return int(self.backend.call("count_text", text))

    def decode(self, ids: Sequence[int]) -> str:
        """Text of token ids."""
        return str(self.backend.call("decode", list(ids)))

    def load(self) -> float | None:
        """Load the model now (it loads on first use otherwise); returns the load time in seconds."""
        value = self.backend.call("load")
        return None if value is None else float(value)

    def worker_pid(self) -> int | None:
        """The process id of the worker running the model (None inline, or before a worker started)."""
        backend = self._backend
        return backend.pid if isinstance(backend, _WorkerBackend) else None

    def close(self) -> None:
        """Free the model (a worker process exits); the next call loads it again.

        A call from another thread meanwhile waits until the worker has exited, so a model's next
        worker never runs beside the last one (two contexts of one model on the NPU).
        """
        with self._backend_lock:
            backend, self._backend = self._backend, None
            if backend is not None:
                backend.close()

    @classmethod
    def close_all(cls) -> None:
        """Close every shared engine (called at interpreter exit)."""
        with cls._registry_lock:
            engines = list(cls._registry.values())
        for engine in engines:
            engine.close()


atexit.register(Engine.close_all)
