"""The one object the adapters talk to: :class:`Engine`.

    Engine.get(model, provider=..., execution=...)      one per (folder, provider, threads, release)
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
import itertools
import json
import logging
import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from . import session as _session
from ._frames import read_frame, write_frame
from .budget import ContextBudget
from .chat_template import ChatTemplate
from .errors import GenerationError, GenerationTimeoutError, InvalidRequestError, WorkerDiedError
from .hub import resolve_model
from .messages import ChatMessage, RawPrompt
from .options import GenerationOptions
from .package import ModelPackage
from .session import CallControl, Session, SessionKey, abandoned_error, check_runtime_settings
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
            self.dropped_messages = chunk.dropped_messages


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


class _InlineBackend:
    def __init__(self, key: SessionKey) -> None:
        self.session = Session(key)

    def call(self, method: str, *args: Any, timeout: float | None = None) -> Any:
        if method == "load":
            self.session.load()
            return self.session.load_seconds
        if method == "prepare":
            self.session.load()
        if method == "info":
            self.session.load()
            return {"pid": os.getpid(), "load_seconds": self.session.load_seconds}
        return getattr(self.session, method)(*args)

    def stream(
        self, messages: Sequence[ChatMessage] | RawPrompt, options: GenerationOptions, timeout: float | None
    ) -> Iterator[Chunk]:
        # The session checks the deadline between tokens and while waiting for the model;
        # the clock starts once the model is loaded.
        self.session.load()
        yield from self.session.stream(messages, options, CallControl(timeout=timeout))

    async def astream(
        self, messages: Sequence[ChatMessage] | RawPrompt, options: GenerationOptions, timeout: float | None
    ) -> AsyncIterator[Chunk]:
        loop = asyncio.get_running_loop()
        aq: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
        control = CallControl(timeout=timeout)
        control.deadline = None  # started once the model is loaded

        def put(item: tuple[str, Any]) -> None:
            try:
                loop.call_soon_threadsafe(aq.put_nowait, item)
            except RuntimeError:  # the caller's event loop is closed: nobody reads, stop generating
                control.cancel.set()

        def produce() -> None:
            try:
                self.session.load()
                control.start_clock()
                for chunk in self.session.stream(messages, options, control):
                    put(("chunk", chunk))
                put(("end", None))
            except BaseException as exc:  # noqa: BLE001
                put(("error", exc))

        thread = threading.Thread(target=produce, daemon=True)
        thread.start()
        async for chunk in _drain(aq, control, control.cancel.set, lambda: None, control.timeout_error):
            yield chunk

    def close(self) -> None:
        self.session.reset_cache()


class _Retry(Exception):
    """The worker died before the call started: send it again."""


async def _drain(
    aq: asyncio.Queue[tuple[str, Any]],
    control: CallControl,
    cancel: Callable[[], None],
    on_wait: Callable[[], None],
    on_timeout: Callable[[], BaseException],
) -> AsyncIterator[Chunk]:
    """Yield chunks from ``aq`` until end or error; cancel the generation if we stop early.

    ``on_wait`` runs every few hundred ms while nothing arrives (the worker backend looks for
    unread streams there); the caller's own deadline is a margin past the model's, which
    reports its timeout itself when it can.
    """
    done = False
    try:
        while True:
            control.idle_since = None
            while True:
                try:
                    kind, value = await asyncio.wait_for(aq.get(), _wait_slice(control))
                    break
                except asyncio.TimeoutError:
                    if _caller_deadline_passed(control):
                        done = True
                        raise on_timeout() from None
                    on_wait()
            if kind == "chunk":
                control.tokens += len(value.token_ids)
                control.idle_since = time.monotonic()
                yield value
            elif kind == "end":
                done = True
                if control.preempted:
                    raise abandoned_error(control.tokens)
                return
            elif kind == "retry":
                done = True
                raise _Retry
            else:
                done = True
                raise value
    finally:
        if not done:
            cancel()


def _caller_deadline(control: CallControl) -> float | None:
    """When the caller stops waiting for a call.

    The deadline, plus a margin once the model works on the call (it reports its own timeout
    between tokens); a queued call cannot report, so it gets no margin.
    """
    if control.deadline is None:
        return None
    return control.deadline + (0.0 if control.phase == "queued" else REPORT_MARGIN)


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


class _WorkerBackend:
    """Talks to a worker process; restarts it on the next call after it died.

    A call that runs out of its timeout is cancelled; if the worker does not finish it
    within :data:`STUCK_GRACE` seconds (a call stuck outside the token loop), the worker is
    replaced, so the model is usable again. Calls that were still waiting in its queue are
    sent to the new worker.
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

    # -- process management
    def _ensure(self) -> subprocess.Popen[bytes]:
        with self._start_lock:
            proc = self._proc
            if proc is not None and proc.poll() is None:
                return proc
            proc = subprocess.Popen(
                [sys.executable, "-m", "ryzenai_core.worker"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
            )
            assert proc.stdin is not None and proc.stdout is not None
            try:
                write_frame(proc.stdin, ("init", self.key), self._write_lock)
                ready = read_frame(proc.stdout)
            except Exception:  # noqa: BLE001 - it exited before reading, or wrote a torn frame
                ready = None
            if ready != ("ready",):
                try:
                    code = proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    code = proc.wait()
                _close_pipes(proc)
                if isinstance(ready, tuple) and ready[0] == "failed":
                    raise ready[1]  # the session could not start (a package that broke since): its own error
                raise GenerationError(f"the model worker failed to start (exit code {code}); see its stderr above")
            self._proc = proc
            threading.Thread(target=self._read, args=(proc,), daemon=True, name="ryzenai-worker-reader").start()
            return proc

    def _ensure_loaded(self) -> None:
        """Load the model in the worker before a timed call (the load is not part of any timeout)."""
        proc = self._ensure()
        if self._loaded_pid != proc.pid:
            self.call("load")
            self._loaded_pid = proc.pid

    def _read(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdout is not None
        while True:
            try:
                msg = read_frame(proc.stdout)
            except Exception:  # noqa: BLE001 - a torn frame: nothing after it can be trusted
                proc.kill()
                msg = None
            if msg is None:
                break
            kind = msg[0]
            if kind == "delta":  # the compact frame of a text-only chunk (see worker.py)
                msg = ("chunk", msg[1], Chunk(text=msg[2], token_ids=msg[3]))
            elif kind == "phase":
                self._running = msg[1]
                control = self._streams.get(msg[1])
                if control is not None:
                    control.phase = msg[2]
                continue
            elif kind in ("end", "error") and self._running == msg[1]:
                self._running = None
            handler = self._handlers.get(msg[1])
            if handler is not None:
                handler(msg)
        code = proc.wait()
        _close_pipes(proc)
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
        except (BrokenPipeError, OSError) as exc:
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

    def _start(self, rid: int, control: CallControl, messages: Sequence[ChatMessage] | RawPrompt, options: Any) -> None:
        control.phase = "queued"
        self._streams[rid] = control
        self._send(
            ("stream", rid, messages if isinstance(messages, RawPrompt) else list(messages), options, control.timeout)
        )

    def _on_wait(self, rid: int, control: CallControl) -> None:
        """A waiting call looks at the streams ahead of it: one nobody reads is stopped."""
        if control.phase != "queued":
            return
        now = time.monotonic()
        for other_rid, other in list(self._streams.items()):
            if other_rid >= rid:
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

    def _timed_out(self, rid: int, control: CallControl) -> GenerationTimeoutError:
        """Cancel a call that ran out of time; replace the worker if it cannot stop it."""
        self._cancel(rid)
        if control.phase != "queued":
            proc = self._proc
            timer = threading.Timer(STUCK_GRACE, self._replace_if_stuck, args=(rid, proc))
            timer.daemon = True
            timer.start()
        return control.timeout_error()

    def _replace_if_stuck(self, rid: int, proc: subprocess.Popen[bytes] | None) -> None:
        if proc is not None and self._running == rid and proc.poll() is None:
            logger.warning(
                "the model worker (pid %s) did not stop a call that ran out of time within %s s; replacing it",
                proc.pid,
                STUCK_GRACE,
            )
            proc.kill()

    def _retry_queued(self, msg: tuple[Any, ...], control: CallControl, retried: bool) -> bool:
        """Whether a call that never started should go to a new worker (the old one died)."""
        return msg[0] == "error" and isinstance(msg[2], WorkerDiedError) and control.phase == "queued" and not retried

    def stream(
        self, messages: Sequence[ChatMessage] | RawPrompt, options: GenerationOptions, timeout: float | None
    ) -> Iterator[Chunk]:
        q: queue.SimpleQueue[tuple[Any, ...]] = queue.SimpleQueue()
        self._ensure_loaded()
        rid = self._register(q.put)
        control = CallControl(timeout=timeout)
        done = False
        retried = False
        try:
            self._start(rid, control, messages, options)
            while True:
                control.idle_since = None
                while True:
                    try:
                        msg = q.get(timeout=_wait_slice(control))
                        break
                    except queue.Empty:
                        if _caller_deadline_passed(control):
                            done = True
                            raise self._timed_out(rid, control) from None
                        self._on_wait(rid, control)
                kind = msg[0]
                if kind == "chunk":
                    control.tokens += len(msg[2].token_ids)
                    control.idle_since = time.monotonic()
                    yield msg[2]
                elif kind == "end":
                    done = True
                    if control.preempted:
                        raise abandoned_error(control.tokens)
                    return
                elif self._retry_queued(msg, control, retried):
                    retried = True
                    self._ensure_loaded()
                    self._start(rid, control, messages, options)
                else:
                    done = True
                    raise msg[2]
        finally:
            self._forget(rid)
            if not done:
                self._cancel(rid)

    async def astream(
        self, messages: Sequence[ChatMessage] | RawPrompt, options: GenerationOptions, timeout: float | None
    ) -> AsyncIterator[Chunk]:
        loop = asyncio.get_running_loop()
        aq: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
        control = CallControl(timeout=timeout)
        retry = threading.Event()

        def handler(msg: tuple[Any, ...]) -> None:
            kind = msg[0]
            if self._retry_queued(msg, control, retry.is_set()):
                retry.set()
                item: tuple[str, Any] = ("retry", None)
            else:
                item = ("chunk", msg[2]) if kind == "chunk" else (("end", None) if kind == "end" else ("error", msg[2]))
            try:
                loop.call_soon_threadsafe(aq.put_nowait, item)
            except RuntimeError:  # the caller's event loop is closed: nobody reads this call
                self._handlers.pop(rid, None)
                self._cancel(rid)

        rid = self._register(handler)
        try:
            await loop.run_in_executor(None, self._ensure_loaded)
            control.start_clock()
            self._start(rid, control, messages, options)
            while True:
                try:
                    async for chunk in _drain(
                        aq,
                        control,
                        lambda: self._cancel(rid),
                        lambda: self._on_wait(rid, control),
                        lambda: self._timed_out(rid, control),
                    ):
                        yield chunk
                    return
                except _Retry:
                    await loop.run_in_executor(None, self._ensure_loaded)
                    self._start(rid, control, messages, options)
        finally:
            self._forget(rid)

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
        proc, self._proc = self._proc, None
        if proc is None:
            return
        try:
            assert proc.stdin is not None
            proc.stdin.close()
            proc.wait(timeout=5)
        except Exception:  # noqa: BLE001
            proc.kill()
            proc.wait()
        _close_pipes(proc)


def _close_pipes(proc: subprocess.Popen[bytes]) -> None:
    for pipe in (proc.stdin, proc.stdout):
        try:
            if pipe is not None:
                pipe.close()
        except OSError:
            pass


# ---------------------------------------------------------------------- engine
class Engine:
    """A model package, ready to generate: see the module docstring.

    Use :meth:`get` to share one engine (and one loaded model) between all adapters that
    name the same folder, provider, thread count and release.
    """

    _registry: dict[tuple[SessionKey, str], Engine] = {}
    _registry_lock = threading.Lock()

    def __init__(self, key: SessionKey, execution: Execution) -> None:
        if execution not in ("process", "inline"):
            raise InvalidRequestError(f"execution {execution!r} is not supported; use 'process' or 'inline'")
        self.key = key
        self.execution = execution
        self.package = ModelPackage.open(key.path, release=key.release)
        self.template = ChatTemplate.for_package(self.package)
        self._backend: _InlineBackend | _WorkerBackend | None = None
        self._backend_lock = threading.Lock()
        self._counts: dict[str, int] = {}

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
        path = model.path if isinstance(model, ModelPackage) else resolve_model(model)
        resolved = str(path.resolve())
        key = SessionKey(
            resolved, provider, num_threads, release, json.dumps(dict(session_options or {}), sort_keys=True)
        )
        mode = execution or os.environ.get(ENV_EXECUTION, "process")
        with cls._registry_lock:
            engine = cls._registry.get((key, mode))
            if engine is None:
                engine = cls(key, mode)  # type: ignore[arg-type]
                cls._registry[(key, mode)] = engine
            return engine

    @property
    def budget(self) -> ContextBudget:
        """The package's context budget."""
        return self.package.budget

    @property
    def backend(self) -> _InlineBackend | _WorkerBackend:
        """The inline session or the worker connection (created on first use)."""
        with self._backend_lock:
            if self._backend is None:
                self._backend = _InlineBackend(self.key) if self.execution == "inline" else _WorkerBackend(self.key)
            return self._backend

    # -- generation
    def stream(
        self,
        messages: Sequence[ChatMessage] | RawPrompt,
        options: GenerationOptions | None = None,
        *,
        timeout: float | None = None,
    ) -> Iterator[Chunk]:
        """Stream the answer to ``messages``; closing the iterator cancels the generation."""
        return self.backend.stream(messages, options or GenerationOptions(), timeout)

    def astream(
        self,
        messages: Sequence[ChatMessage] | RawPrompt,
        options: GenerationOptions | None = None,
        *,
        timeout: float | None = None,
    ) -> AsyncIterator[Chunk]:
        """Async twin of :meth:`stream`; cancelling the task cancels the generation."""
        return self.backend.astream(messages, options or GenerationOptions(), timeout)

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
        """Tokens of ``text`` alone (cached: for fixed texts such as a tool call's framing)."""
        cache = self._counts
        if text not in cache:
            if len(cache) >= 1024:
                cache.clear()
            cache[text] = len(self.encode(text))
        return cache[text]

    def decode(self, ids: Sequence[int]) -> str:
        """Text of token ids."""
        return str(self.backend.call("decode", list(ids)))

    def load(self) -> float | None:
        """Load the model now (it loads on first use otherwise); returns the load time in seconds."""
        value = self.backend.call("load")
        return None if value is None else float(value)

    def close(self) -> None:
        """Free the model (a worker process exits); the next call loads it again."""
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
