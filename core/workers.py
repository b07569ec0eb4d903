"""Worker processes, for every kind of model: one start, one reader, deadlines, replacement.

:class:`WorkerConnection` is a model in a worker process as its caller sees it, the same for an
LLM (:class:`~ryzenai_core.engine.client.WorkerClient` builds its streams on it) and for an
encoder session (:class:`~ryzenai_core.embeddings.runner.WorkerBackend`):

- the worker starts on demand (:func:`~ryzenai_core.spawn.popen_worker`), and one that sends
  nothing within its start deadline is stopped (:func:`read_first_frame`);
- one reader thread per worker hands every frame to the request it answers; a worker that exits
  (or tears a frame) fails the requests it held, and the next request starts a new worker;
- every request waits with a deadline (:meth:`WorkerConnection.request`): past it the caller gets
  a :class:`~ryzenai_core.errors.GenerationTimeoutError` naming the value and its setting, and a
  worker that has not answered within a grace after that (none for a worker that cannot stop
  what it is doing) is killed and replaced by the next request.

The deadlines, in seconds (environment variables read at import):

- :data:`START_TIMEOUT` (``RYZENAI_LLM_START_TIMEOUT``, 120): a worker starts and answers its
  first frame (an LLM worker opens its package, not the model);
- :data:`LOAD_TIMEOUT` (``RYZENAI_LLM_LOAD_TIMEOUT``, 600): a worker loads its model (an LLM's
  load; an encoder worker's start, which opens its session, compiling it on the NPU);
- :data:`CALL_TIMEOUT` (``RYZENAI_LLM_CALL_TIMEOUT``, 300): a worker answers a request that has
  no timeout of its own (an LLM's token count, render, encode, decode; an encoder's batch).

A generation's deadline is its own ``timeout`` (see :mod:`ryzenai_core.engine.inflight`).
"""

from __future__ import annotations

import itertools
import logging
import os
import queue
import subprocess
import threading
from collections.abc import Callable
from typing import Any, ClassVar

from .errors import GenerationError, GenerationTimeoutError, WorkerDiedError
from .ipc import (
    PIPE_BUFFER,
    Error,
    Failed,
    Init,
    Message,
    Ready,
    Result,
    parse_frame,
    read_frame,
    read_frame_bytes,
    reap,
    write_frame,
)
from .spawn import popen_worker

__all__ = ["CALL_TIMEOUT", "LOAD_TIMEOUT", "START_TIMEOUT", "Deadline", "WorkerConnection", "read_first_frame"]

logger = logging.getLogger(__name__)

#: Seconds a new worker process may take to start and answer its first frame (an LLM's: not the load).
START_TIMEOUT = float(os.environ.get("RYZENAI_LLM_START_TIMEOUT", "120"))
#: Seconds a worker may take to load its model (an encoder worker: to start and open its session).
LOAD_TIMEOUT = float(os.environ.get("RYZENAI_LLM_LOAD_TIMEOUT", "600"))
#: Seconds a worker may take to answer a request without a timeout of its own (a token count, a batch).
CALL_TIMEOUT = float(os.environ.get("RYZENAI_LLM_CALL_TIMEOUT", "300"))


class Deadline:
    """A wait's length and the setting that gives it (for the error that names both)."""

    __slots__ = ("seconds", "setting")

    def __init__(self, seconds: float, setting: str) -> None:
        self.seconds, self.setting = seconds, setting

    @classmethod
    def start(cls) -> Deadline:
        """:data:`START_TIMEOUT`, read now (tests and programs may change it)."""
        return cls(START_TIMEOUT, "RYZENAI_LLM_START_TIMEOUT")

    @classmethod
    def load(cls) -> Deadline:
        """:data:`LOAD_TIMEOUT`, read now."""
        return cls(LOAD_TIMEOUT, "RYZENAI_LLM_LOAD_TIMEOUT")

    @classmethod
    def call(cls) -> Deadline:
        """:data:`CALL_TIMEOUT`, read now."""
        return cls(CALL_TIMEOUT, "RYZENAI_LLM_CALL_TIMEOUT")


def read_first_frame(
    proc: subprocess.Popen[bytes], deadline: Deadline | None = None, what: str = "model worker"
) -> Message | None:
    """The worker's first message; None if it exits or tears it.

    Raises:
        GenerationError: it sent nothing within the deadline (default :data:`START_TIMEOUT`); it is killed then.
    """
    deadline = deadline or Deadline.start()
    assert proc.stdout is not None
    stdout = proc.stdout
    got: list[Message | None] = []

    def read() -> None:
        try:
            got.append(read_frame(stdout))
        except Exception:  # noqa: BLE001 - a torn frame
            got.append(None)

    reader = threading.Thread(target=read, daemon=True, name="ryzenai-worker-start")
    reader.start()
    reader.join(deadline.seconds)
    if reader.is_alive():
        logger.warning("the %s (pid %s) sent nothing within %s s; stopping it", what, proc.pid, deadline.seconds)
        proc.kill()
        reader.join(10)
        raise GenerationError(
            f"the {what} did not start within {deadline.seconds:g} s ({deadline.setting}) and was stopped; "
            f"see its stderr above. A machine under heavy load may need more: raise {deadline.setting}"
        )
    return got[0] if got else None


class WorkerConnection:
    """A worker process serving one spec, as its caller sees it (see the module docstring).

    Subclasses name the worker's module (:attr:`module`) and how messages call it
    (:attr:`what`); :meth:`first_frame_deadline` says how long its start may take.
    """

    module: ClassVar[str]
    """The worker's module (``python -m <module>``)."""
    what: ClassVar[str] = "model worker"
    """How messages name the worker."""

    def __init__(self, spec: Any) -> None:
        self.spec = spec
        self._proc: subprocess.Popen[bytes] | None = None
        self._start_lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._lock = threading.Lock()
        self._handlers: dict[int, Callable[[Message], None]] = {}
        self._sent_to: dict[int, int] = {}  # request id -> pid of the worker it was sent to
        self._late: dict[int, int] = {}  # requests whose caller stopped waiting, not answered yet -> worker pid
        self._ids = itertools.count(1)
        self._closed = False

    # -- process management
    def spawn(self) -> subprocess.Popen[bytes]:
        """A new worker process (it waits for :class:`~ryzenai_core.ipc.Init`)."""
        return popen_worker(self.module, bufsize=PIPE_BUFFER, env=self.environment())

    def environment(self) -> dict[str, str] | None:
        """A new worker's environment: None for this process's own (a subclass may add to it)."""
        return None

    def first_frame_deadline(self) -> Deadline:
        """How long a new worker may take to answer :class:`~ryzenai_core.ipc.Init`."""
        return Deadline.start()

    def started(self, proc: subprocess.Popen[bytes], ready: Ready) -> None:
        """A new worker answered :class:`~ryzenai_core.ipc.Ready` (a subclass may say so)."""

    def start_worker(self) -> subprocess.Popen[bytes]:
        """Start the worker now, as the next request would (it answers Ready first); the running worker.

        Raises:
            GenerationError: it did not start within :meth:`first_frame_deadline`, or failed to.
            WorkerDiedError: the connection was closed.
            what the worker's start raised (a package that cannot open: its own error).
        """
        return self._ensure()

    def _ensure(self) -> subprocess.Popen[bytes]:
        with self._start_lock:
            proc = self._proc
            # A closed stdin: its reader thread saw it die and is reaping it (poll() may not say so yet).
            if proc is not None and proc.poll() is None and proc.stdin is not None and not proc.stdin.closed:
                return proc
            if self._closed:  # a call still in flight (a resend) after close(): no new worker
                raise WorkerDiedError("the engine was closed during the call")
            if proc is not None:
                logger.warning("the %s (pid %s) had exited; starting a new one", self.what, proc.pid)
            proc = self.spawn()
            assert proc.stdin is not None and proc.stdout is not None
            try:
                write_frame(proc.stdin, Init(self.spec), self._write_lock)
            except OSError:  # it exited before reading
                pass
            try:
                ready = read_first_frame(proc, self.first_frame_deadline(), self.what)
            except GenerationError:  # silent: killed
                reap(proc, timeout=10)
                raise
            if not isinstance(ready, Ready):
                code = reap(proc, timeout=10)
                if isinstance(ready, Failed):
                    raise ready.error  # what it serves could not open (a package that broke since): its own error
                raise GenerationError(
                    f"the {self.what} failed to start (exit code {code}); see its stderr above (an execution "
                    "provider crash?). The next call starts a new worker"
                )
            self._proc = proc
            self.started(proc, ready)
            reader = threading.Thread(target=self._read, args=(proc,), daemon=True, name=f"ryzenai-reader-{proc.pid}")
            reader.start()
            return proc

    def _read(self, proc: subprocess.Popen[bytes]) -> None:
        """The reader thread: hands every frame from the worker to its request until the pipe ends.

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

    def _dispatch(self, msg: Message) -> None:
        """Hand a message from the worker to its request (one nobody waits for any more is dropped)."""
        rid = getattr(msg, "rid", None)
        if rid is None:
            return  # nothing a request waits for (a worker speaks first only once)
        with self._lock:
            handler = self._handlers.get(rid)
            if handler is None and isinstance(msg, (Result, Error)):
                self._late.pop(rid, None)  # answered after its caller stopped waiting: the worker is not stuck
        if handler is not None:
            handler(msg)

    def _died(self, proc: subprocess.Popen[bytes]) -> None:
        """The worker's pipe ended (it exited, was killed or closed, or tore a frame): fail its requests."""
        code = reap(proc)
        err = WorkerDiedError(
            f"the {self.what} process (pid {proc.pid}) exited with code {code} during the call; "
            "the next call starts a new worker"
        )
        with self._lock:
            for rid in [r for r, pid in self._late.items() if pid == proc.pid]:
                del self._late[rid]  # it answers nothing now
            failed = [(rid, handler) for rid, handler in self._handlers.items() if self._sent_to.get(rid) == proc.pid]
            for rid, _ in failed:
                del self._sent_to[rid]  # claimed here: a send that failed on this worker does not fail it again
        for rid, handler in failed:  # outside the lock: a handler may resend, which takes it
            handler(Error(rid, err))

    def _claim(self, rid: int, pid: int) -> bool:
        """Take request ``rid``'s failure on worker ``pid``; False when the reader thread already failed it."""
        with self._lock:
            if self._sent_to.get(rid) != pid:
                return False
            del self._sent_to[rid]
            return True

    def _send(
        self, message: Any, deadline: Deadline | None = None, doing: str = "", phase: str = ""
    ) -> subprocess.Popen[bytes]:
        """Send a request to the worker (started if needed); the worker it went to.

        With a ``deadline``, a worker that does not read the request within it (a frame larger than
        the pipe holds waits for the worker to read it) is replaced and the send raises
        :class:`~ryzenai_core.errors.GenerationTimeoutError` with ``phase``.
        """
        proc = self._ensure()
        assert proc.stdin is not None
        with self._lock:
            self._sent_to[message.rid] = proc.pid
        unread: list[bool] = []
        watchdog = None
        if deadline is not None:
            seconds = deadline.seconds

            def stop_unread() -> None:
                unread.append(True)
                logger.warning("the %s (pid %s) read nothing for %s s; replacing it", self.what, proc.pid, seconds)
                self._retire(proc)

            watchdog = threading.Timer(deadline.seconds, stop_unread)
            watchdog.daemon = True
            watchdog.start()
        try:
            write_frame(proc.stdin, message, self._write_lock)
        except (OSError, ValueError) as exc:  # ValueError: its pipe was closed (the reader thread saw it die)
            if unread and deadline is not None:  # the watchdog stopped it: the caller's error is the timeout
                raise GenerationTimeoutError(
                    f"the {self.what} (pid {proc.pid}) did not read {doing} within {deadline.seconds:g} s "
                    f"({deadline.setting}); it was stopped, and the next call starts a new worker",
                    phase=phase,
                ) from exc
            if not self._claim(message.rid, proc.pid):
                # The reader thread saw the worker die first and gave the request's handler that error
                # (a stream is resent from there): failing it here too would handle it twice.
                return proc
            raise WorkerDiedError(
                f"the {self.what} process (pid {proc.pid}) is gone ({exc}); the next call starts a new worker"
            ) from exc
        finally:
            if watchdog is not None:
                watchdog.cancel()
        return proc

    def _retire(self, proc: subprocess.Popen[bytes]) -> None:
        """Kill a worker that is stuck; the next call starts a new one at once (its reader thread reaps it)."""
        with self._start_lock:
            if self._proc is proc:
                self._proc = None
        proc.kill()

    def _register(self, handler: Callable[[Message], None]) -> int:
        with self._lock:
            rid = next(self._ids)
            self._handlers[rid] = handler
        return rid

    def _forget(self, rid: int) -> None:
        with self._lock:
            self._handlers.pop(rid, None)
            self._sent_to.pop(rid, None)

    def _waiting(self, rid: int) -> bool:
        """Whether request ``rid`` still has a caller (it was not forgotten or orphaned)."""
        with self._lock:
            return rid in self._handlers

    # -- requests
    def request(
        self, message: Callable[[int], Any], deadline: Deadline, *, doing: str, phase: str, grace: float
    ) -> Any:
        """Send ``message(rid)`` and wait for its :class:`~ryzenai_core.ipc.Result` within ``deadline``.

        ``doing`` names the request in messages (``"a batch of 32 x 128 tokens"``); a worker that
        has not answered ``grace`` seconds after the deadline is replaced (at once with 0: a worker
        that cannot stop what it is doing).

        Raises:
            GenerationTimeoutError: no answer within the deadline (``phase`` is its ``phase``).
            WorkerDiedError: the worker died before it answered.
            the worker's own error for the request.
        """
        q: queue.SimpleQueue[Message] = queue.SimpleQueue()
        rid = self._register(q.put)
        try:
            proc = self._send(message(rid), deadline, doing, phase)
            try:
                msg = q.get(timeout=deadline.seconds)
            except queue.Empty:
                with self._lock:
                    self._late[rid] = proc.pid
                self.stop_if_stuck(proc, grace, lambda: self._is_late(rid), doing)
                replaced = "it was stopped" if grace <= 0 else f"it is stopped if it has not answered {grace:g} s later"
                raise GenerationTimeoutError(
                    f"the {self.what} (pid {proc.pid}) did not answer {doing} within {deadline.seconds:g} s "
                    f"({deadline.setting}); {replaced}, and the next call starts a new worker. A machine under heavy "
                    f"load may need more: raise {deadline.setting}",
                    phase=phase,
                ) from None
        finally:
            self._forget(rid)
        if isinstance(msg, Error):
            raise msg.error
        assert isinstance(msg, Result)
        return msg.value

    def _is_late(self, rid: int) -> bool:
        with self._lock:
            return rid in self._late

    def stop_if_stuck(
        self, proc: subprocess.Popen[bytes] | None, grace: float, stuck: Callable[[], bool], doing: str
    ) -> None:
        """Kill ``proc`` if ``stuck()`` still says so ``grace`` seconds from now (at once with 0).

        The next call starts a new worker (at once: it does not wait for this one to be reaped).
        """

        def check() -> None:
            if proc is None or proc.poll() is not None or not stuck():
                return
            logger.warning(
                "the %s (pid %s) did not finish %s that ran out of time within %s s; replacing it",
                self.what,
                proc.pid,
                doing,
                grace,
            )
            self._retire(proc)

        if grace <= 0:
            check()
            return
        timer = threading.Timer(grace, check)
        timer.daemon = True
        timer.start()

    @property
    def pid(self) -> int | None:
        """The running worker's process id (None before it started or after it exited)."""
        return self._proc.pid if self._proc is not None and self._proc.poll() is None else None

    def close(self) -> None:
        """End the worker; requests in flight fail and none is sent to a new worker."""
        self._closed = True  # requests still in flight fail; none is sent to a new worker
        with self._start_lock:  # a worker starting now is ended too
            proc, self._proc = self._proc, None
        if proc is not None:
            reap(proc, timeout=5)
