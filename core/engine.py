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
import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from ._frames import read_frame, write_frame
from .budget import ContextBudget
from .chat_template import ChatTemplate
from .errors import GenerationError, GenerationTimeoutError, InvalidRequestError, WorkerDiedError
from .hub import resolve_model
from .messages import ChatMessage, RawPrompt
from .options import GenerationOptions
from .package import ModelPackage
from .session import Session, SessionKey
from .streaming import Chunk

__all__ = ["Completion", "Engine", "Execution", "aggregate"]

Execution = Literal["process", "inline"]
ENV_EXECUTION = "RYZENAI_LLM_EXECUTION"


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
        cancel = threading.Event()
        deadline = None if timeout is None else time.monotonic() + timeout
        inner = self.session.stream(messages, options, cancel)
        try:
            for chunk in inner:
                if deadline is not None and time.monotonic() > deadline:
                    cancel.set()
                    raise GenerationTimeoutError(f"generation took longer than timeout={timeout} s and was cancelled")
                yield chunk
        finally:
            inner.close()

    async def astream(
        self, messages: Sequence[ChatMessage] | RawPrompt, options: GenerationOptions, timeout: float | None
    ) -> AsyncIterator[Chunk]:
        loop = asyncio.get_running_loop()
        aq: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
        cancel = threading.Event()

        def produce() -> None:
            try:
                for chunk in self.session.stream(messages, options, cancel):
                    loop.call_soon_threadsafe(aq.put_nowait, ("chunk", chunk))
                loop.call_soon_threadsafe(aq.put_nowait, ("end", None))
            except BaseException as exc:  # noqa: BLE001
                loop.call_soon_threadsafe(aq.put_nowait, ("error", exc))

        thread = threading.Thread(target=produce, daemon=True)
        thread.start()
        async for chunk in _drain(aq, timeout, cancel.set):
            yield chunk

    def close(self) -> None:
        self.session.reset_cache()


async def _drain(
    aq: asyncio.Queue[tuple[str, Any]], timeout: float | None, cancel: Callable[[], None]
) -> AsyncIterator[Chunk]:
    """Yield chunks from ``aq`` until end or error; cancel the generation if we stop early."""
    deadline = None if timeout is None else time.monotonic() + timeout
    done = False
    try:
        while True:
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                raise GenerationTimeoutError(f"generation took longer than timeout={timeout} s and was cancelled")
            try:
                kind, value = await asyncio.wait_for(aq.get(), remaining)
            except asyncio.TimeoutError:
                raise GenerationTimeoutError(
                    f"generation took longer than timeout={timeout} s and was cancelled"
                ) from None
            if kind == "chunk":
                yield value
            elif kind == "end":
                done = True
                return
            else:
                done = True
                raise value
    finally:
        if not done:
            cancel()


class _WorkerBackend:
    """Talks to a worker process; restarts it on the next call after it died."""

    def __init__(self, key: SessionKey) -> None:
        self.key = key
        self._proc: subprocess.Popen[bytes] | None = None
        self._start_lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._handlers: dict[int, Callable[[tuple[Any, ...]], None]] = {}
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
            write_frame(proc.stdin, ("init", self.key), self._write_lock)
            ready = read_frame(proc.stdout)
            if ready != ("ready",):
                code = proc.wait(timeout=10)
                raise GenerationError(f"the model worker failed to start (exit code {code}); see its stderr above")
            self._proc = proc
            threading.Thread(target=self._read, args=(proc,), daemon=True, name="ryzenai-worker-reader").start()
            return proc

    def _read(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdout is not None
        while True:
            try:
                msg = read_frame(proc.stdout)
            except Exception:  # noqa: BLE001 - a torn frame from a dying worker
                msg = None
            if msg is None:
                break
            if msg[0] == "delta":  # the compact frame of a text-only chunk (see worker.py)
                msg = ("chunk", msg[1], Chunk(text=msg[2], token_ids=msg[3]))
            handler = self._handlers.get(msg[1])
            if handler is not None:
                handler(msg)
        code = proc.wait()
        _close_pipes(proc)
        err = WorkerDiedError(
            f"the model worker process (pid {proc.pid}) exited with code {code} during the call; "
            "the next call starts a new worker"
        )
        for rid, handler in list(self._handlers.items()):
            handler(("error", rid, err))

    def _send(self, message: tuple[Any, ...]) -> None:
        proc = self._ensure()
        assert proc.stdin is not None
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

    # -- calls
    def call(self, method: str, *args: Any, timeout: float | None = None) -> Any:
        q: queue.SimpleQueue[tuple[Any, ...]] = queue.SimpleQueue()
        rid = self._register(q.put)
        try:
            self._send(("call", rid, method, args))
            try:
                msg = q.get(timeout=timeout)
            except queue.Empty:
                raise GenerationTimeoutError(f"{method} took longer than timeout={timeout} s") from None
        finally:
            self._handlers.pop(rid, None)
        if msg[0] == "error":
            raise msg[2]
        return msg[2]

    def stream(
        self, messages: Sequence[ChatMessage] | RawPrompt, options: GenerationOptions, timeout: float | None
    ) -> Iterator[Chunk]:
        q: queue.SimpleQueue[tuple[Any, ...]] = queue.SimpleQueue()
        rid = self._register(q.put)
        deadline = None if timeout is None else time.monotonic() + timeout
        done = False
        try:
            self._send(("stream", rid, messages if isinstance(messages, RawPrompt) else list(messages), options))
            while True:
                remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
                try:
                    msg = q.get(timeout=remaining)
                except queue.Empty:
                    raise GenerationTimeoutError(
                        f"generation took longer than timeout={timeout} s and was cancelled"
                    ) from None
                if msg[0] == "chunk":
                    yield msg[2]
                elif msg[0] == "end":
                    done = True
                    return
                else:
                    done = True
                    raise msg[2]
        finally:
            self._handlers.pop(rid, None)
            if not done:
                self._cancel(rid)

    async def astream(
        self, messages: Sequence[ChatMessage] | RawPrompt, options: GenerationOptions, timeout: float | None
    ) -> AsyncIterator[Chunk]:
        loop = asyncio.get_running_loop()
        aq: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()

        def handler(msg: tuple[Any, ...]) -> None:
            kind = msg[0]
            item = ("chunk", msg[2]) if kind == "chunk" else (("end", None) if kind == "end" else ("error", msg[2]))
            loop.call_soon_threadsafe(aq.put_nowait, item)

        rid = self._register(handler)
        try:
            await loop.run_in_executor(None, self._ensure)
            self._send(("stream", rid, messages if isinstance(messages, RawPrompt) else list(messages), options))
            async for chunk in _drain(aq, timeout, lambda: self._cancel(rid)):
                yield chunk
        finally:
            self._handlers.pop(rid, None)

    def _cancel(self, rid: int) -> None:
        try:
            self._send(("cancel", rid))
        except GenerationError:
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
