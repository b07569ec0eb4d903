"""The one object the adapters talk to: :class:`Engine`.

    Engine.get(model, provider=..., execution=...)      one per (folder, provider, threads, release);
                                                        one per NPU model (see Engine.get)
      .stream(messages, options)   -> Iterator[Chunk]    sync
      .astream(messages, options)  -> AsyncIterator[Chunk]
      .generate / .agenerate       -> Completion         aggregates of the stream
      .count_tokens / .encode / .decode / .render

Execution:
- ``"process"`` (default): the model lives in a worker process
  (:mod:`ryzenai_core.engine.worker`). onnxruntime-genai holds the GIL during prefill and decode;
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
import dataclasses
import itertools
import json
import logging
import os
import queue
import subprocess
import threading
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Generator, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from ..errors import GenerationError, GenerationTimeoutError, InvalidRequestError, RyzenAIError, WorkerDiedError
from ..generation import call as _call
from ..generation.call import CallControl, abandoned_error
from ..generation.session import Session, SessionKey
from ..generation.streaming import Chunk
from ..ipc import PIPE_BUFFER, parse_frame, read_frame, read_frame_bytes, reap, write_frame
from ..messages import ChatMessage, RawPrompt
from ..options import GenerationOptions, check_runtime_settings
from ..package.budget import ContextBudget
from ..package.folder import ModelPackage
from ..package.hub import resolve_model
from ..prompt.templates import ChatTemplate, PackageTemplates
from ..request import Request
from ..spawn import popen_worker

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

    def precheck(self, request: Request) -> None:
        """Refuse a request that cannot run before anything is loaded for it."""

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
            self.precheck(request)
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
            self.precheck(request)
            await loop.run_in_executor(None, self.ensure_loaded)
            call.control.start_clock()
            self.launch(call)
            while (chunk := call.take(await _aget(aq, call))) is not None:
                yield chunk
        finally:
            self.finish(call)


class _InlineBackend(_Backend):
    """The model in this process.

    Every generation runs on a thread of its own and hands its chunks to the caller's queue, so
    every wait has a deadline, a cancel stops it within a token and an event loop is never blocked.
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

    def precheck(self, request: Request) -> None:
        self.session.refuse(request.options)

    def launch(self, call: _Pending) -> None:
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


class _WorkerBackend(_Backend):
    """Talks to a worker process; restarts it on the next call after it died.

    A call that runs out of its timeout is cancelled; if the worker does not finish it
    within :data:`STUCK_GRACE` seconds (a call stuck outside the token loop), the worker is
    replaced, so the model is usable again. Calls that were still waiting in its queue are
    sent to the new worker.

    One reader thread per worker reads every frame and hands it to its call (sync, async or
    concurrent alike); a caller only ever waits on its own queue, with its deadline.
    """

    def __init__(self, key: SessionKey) -> None:
        self.key = key
        self._proc: subprocess.Popen[bytes] | None = None
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
            # A closed stdin: its reader thread saw it die and is reaping it (poll() may not say so yet).
            if proc is not None and proc.poll() is None and proc.stdin is not None and not proc.stdin.closed:
                return proc
            if self._closed:  # a call still in flight (a resend) after close(): no new worker
                raise WorkerDiedError("the engine was closed during the call")
            proc = popen_worker("ryzenai_core.engine.worker", bufsize=PIPE_BUFFER)
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
            self._proc = proc
            threading.Thread(target=self._read, args=(proc,), daemon=True, name="ryzenai-worker-reader").start()
            return proc

    def ensure_loaded(self) -> None:
        """Load the model in the worker before a timed call (the load is not part of any timeout)."""
        proc = self._ensure()
        if self._loaded_pid != proc.pid:
            self.call("load")
            self._loaded_pid = proc.pid

    def _read(self, proc: subprocess.Popen[bytes]) -> None:
        """The reader thread: hands every frame from the worker to its call until the pipe ends.

        No signal interrupts this thread (Python delivers them to the main thread), so a frame is
        never left half read; a torn frame (the worker died writing it) ends the worker.
        """
        assert proc.stdout is not None
        stdout = proc.stdout
        try:
            while True:
                try:
                    data = read_frame_bytes(stdout)
                    if data is None:
                        break
                    msg = parse_frame(data)
                except Exception:  # noqa: BLE001 - a torn frame: nothing after it can be trusted
                    proc.kill()
                    break
                self._dispatch(msg)
        finally:
            self._died(proc)

    def _dispatch(self, msg: tuple[Any, ...]) -> None:
        """Hand a message from the worker to its call."""
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

    def _died(self, proc: subprocess.Popen[bytes]) -> None:
        """The worker's pipe ended (it exited, was killed or closed, or tore a frame): fail its calls."""
        code = reap(proc)
        if self._running is not None and self._sent_to.get(self._running) == proc.pid:
            self._running = None
        err = WorkerDiedError(
            f"the model worker process (pid {proc.pid}) exited with code {code} during the call; "
            "the next call starts a new worker"
        )
        for rid, handler in list(self._handlers.items()):
            if self._sent_to.get(rid) == proc.pid:
                handler(("error", rid, err))

    def _send(self, message: tuple[Any, ...]) -> None:
        proc = self._ensure()
        assert proc.stdin is not None
        if message[0] in ("stream", "call"):
            self._sent_to[message[1]] = proc.pid
        try:
            write_frame(proc.stdin, message, self._write_lock)
        except (OSError, ValueError) as exc:  # ValueError: its pipe was closed (the reader thread saw it die)
            raise WorkerDiedError(
                f"the model worker process (pid {proc.pid}) is gone ({exc}); the next call starts a new worker"
            ) from exc

    def _register(self, handler: Callable[[tuple[Any, ...]], None]) -> int:
        rid = next(self._ids)
        self._handlers[rid] = handler
        return rid

    def _forget(self, rid: int) -> None:
        self._handlers.pop(rid, None)
        self._sent_to.pop(rid, None)
        self._streams.pop(rid, None)

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
        try:
            self._send(("stream", call.rid, messages, request.options, control.timeout))
        except WorkerDiedError as exc:  # it died before the request reached it: resent as the policy says
            if self._closed or not call.may_retry(exc):
                raise
            threading.Thread(target=self._resend, args=(call,), daemon=True).start()

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
                and now - idle >= _call.ABANDON_AFTER
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
        except (OSError, ValueError):  # ValueError: its pipe was closed (it died just now)
            pass

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None and self._proc.poll() is None else None

    def close(self) -> None:
        self._closed = True  # calls still in flight fail; none is sent to a new worker
        proc, self._proc = self._proc, None
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
        (see :func:`~ryzenai_core.package.hub.resolve_model`). ``session_options`` are ONNX Runtime
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
