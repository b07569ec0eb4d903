"""The worker client: a model in a worker process (:mod:`ryzenai_core.engine.worker`).

One reader thread per worker hands every frame to its call; a call whose worker died before
any output is sent again to a new worker; a worker that cannot stop a call that ran out of
time is replaced; a worker that does not start within :data:`START_TIMEOUT` is stopped.
"""

from __future__ import annotations

import itertools
import logging
import os
import queue
import subprocess
import threading
from collections.abc import Callable
from typing import Any

from ..errors import GenerationError, GenerationTimeoutError, WorkerDiedError
from ..generation.call import Phase
from ..generation.loader import SessionKey
from ..generation.streaming import Chunk
from ..ipc import (
    Call,
    Cancel,
    Delta,
    End,
    Error,
    Failed,
    Init,
    Message,
    Output,
    PhaseReport,
    Ready,
    Result,
    Stream,
    parse_frame,
    read_frame,
    read_frame_bytes,
    reap,
    write_frame,
)
from ..messages import RawPrompt
from .inflight import Backend, PendingCall
from .spare import start_worker, take_spare

__all__ = ["START_TIMEOUT", "STUCK_GRACE", "WorkerClient", "read_first_frame"]

logger = logging.getLogger(__name__)

#: Seconds a worker may take to stop a call that ran out of time before it is replaced by a new one.
STUCK_GRACE = float(os.environ.get("RYZENAI_LLM_STUCK_GRACE", "10"))
#: Seconds a new worker process may take to start and open the package (not to load the model).
START_TIMEOUT = float(os.environ.get("RYZENAI_LLM_START_TIMEOUT", "120"))


def read_first_frame(proc: subprocess.Popen[bytes]) -> Message | None:
    """The worker's first message; None if it exits or tears it.

    Raises:
        GenerationError: it sent nothing within :data:`START_TIMEOUT` seconds (it is killed then).
    """
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
    reader.join(START_TIMEOUT)
    if reader.is_alive():
        logger.warning("the model worker (pid %s) sent nothing within %s s; stopping it", proc.pid, START_TIMEOUT)
        proc.kill()
        reader.join(10)
        raise GenerationError(
            f"the model worker did not start within {START_TIMEOUT:g} s (RYZENAI_LLM_START_TIMEOUT) "
            "and was stopped; see its stderr above. A machine under heavy load may need more: "
            "raise RYZENAI_LLM_START_TIMEOUT"
        )
    return got[0] if got else None


class WorkerClient(Backend):
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
        self._handlers: dict[int, Callable[[Message], None]] = {}
        self._sent_to: dict[int, int] = {}  # request id -> pid of the worker it was sent to
        self._streams: dict[int, PendingCall] = {}  # open streams, oldest first
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
            proc = take_spare() or start_worker()  # the one started ahead, when one waits
            assert proc.stdin is not None and proc.stdout is not None
            try:
                write_frame(proc.stdin, Init(self.key), self._write_lock)
            except OSError:  # it exited before reading
                pass
            try:
                ready = read_first_frame(proc)
            except GenerationError:  # silent: killed
                reap(proc, timeout=10)
                raise
            if not isinstance(ready, Ready):
                code = reap(proc, timeout=10)
                if isinstance(ready, Failed):
                    raise ready.error  # the session could not start (a package that broke since): its own error
                raise GenerationError(f"the model worker failed to start (exit code {code}); see its stderr above")
            self._proc = proc
            reader = threading.Thread(target=self._read, args=(proc,), daemon=True, name=f"ryzenai-reader-{proc.pid}")
            reader.start()
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

    def _dispatch(self, msg: Message) -> None:
        """Hand a message from the worker to its call."""
        if isinstance(msg, PhaseReport):
            self._running = msg.rid
            stream = self._streams.get(msg.rid)
            if stream is not None:
                stream.control.phase = Phase(msg.phase)
            return
        if isinstance(msg, (End, Error)):
            if self._running == msg.rid:
                self._running = None
        elif not isinstance(msg, (Delta, Output, Result)):
            return  # nothing a call waits for (a worker speaks first only once)
        handler = self._handlers.get(msg.rid)
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
                handler(Error(rid, err))

    def _send(self, message: Stream | Call) -> None:
        proc = self._ensure()
        assert proc.stdin is not None
        self._sent_to[message.rid] = proc.pid
        try:
            write_frame(proc.stdin, message, self._write_lock)
        except (OSError, ValueError) as exc:  # ValueError: its pipe was closed (the reader thread saw it die)
            raise WorkerDiedError(
                f"the model worker process (pid {proc.pid}) is gone ({exc}); the next call starts a new worker"
            ) from exc

    def _register(self, handler: Callable[[Message], None]) -> int:
        rid = next(self._ids)
        self._handlers[rid] = handler
        return rid

    def _forget(self, rid: int) -> None:
        self._handlers.pop(rid, None)
        self._sent_to.pop(rid, None)
        self._streams.pop(rid, None)

    # -- calls
    def call(self, method: str, *args: Any, timeout: float | None = None) -> Any:
        """Run a session method in the worker and wait for its result (up to ``timeout`` seconds)."""
        q: queue.SimpleQueue[Message] = queue.SimpleQueue()
        rid = self._register(q.put)
        try:
            self._send(Call(rid, method, args))
            try:
                msg = q.get(timeout=timeout)
            except queue.Empty:
                raise GenerationTimeoutError(f"{method} took longer than timeout={timeout} s", phase=method) from None
        finally:
            self._forget(rid)
        if isinstance(msg, Error):
            raise msg.error
        assert isinstance(msg, Result)
        return msg.value

    def launch(self, call: PendingCall) -> None:
        """Send a stream to the worker (to a new one, if it died before the request reached it)."""
        if not call.rid:

            def handler(msg: Message) -> None:
                if isinstance(msg, Delta):  # the compact message of a text-only chunk (see worker.chunk_message)
                    call.started_output = True
                    call.put(Chunk(text=msg.text, token_ids=msg.token_ids))
                elif isinstance(msg, Output):
                    call.started_output = True
                    call.put(msg.chunk)
                elif isinstance(msg, End):
                    call.put(None)
                elif isinstance(msg, Error):
                    if not self._closed and call.may_retry(msg.error):  # a closed engine starts no new worker
                        threading.Thread(target=self._resend, args=(call,), daemon=True).start()
                    else:
                        call.put(msg.error)

            call.rid = self._register(handler)
        control, request = call.control, call.request
        control.phase = Phase.QUEUED
        self._streams[call.rid] = call
        messages = request.messages if isinstance(request.messages, RawPrompt) else list(request.messages)
        try:
            self._send(Stream(call.rid, messages, request.options, control.timeout))
        except WorkerDiedError as exc:  # it died before the request reached it: resent as the policy says
            if self._closed or not call.may_retry(exc):
                raise
            threading.Thread(target=self._resend, args=(call,), daemon=True).start()

    def _resend(self, call: PendingCall) -> None:
        """Send a call whose worker died before any output to a new worker (unless its caller left)."""
        if call.rid not in self._handlers:
            return
        control = call.control
        # Loading the model in the new worker is no part of the call's time (as on a first call).
        # "queued" first: the caller then looks again every QUEUED_POLL seconds, so it sees the
        # deadline come back (it would otherwise block without one).
        control.phase = Phase.QUEUED
        try:
            with control.cancel.paused():
                self.ensure_loaded()
            if call.rid in self._handlers:  # its caller may have left during the load
                self.launch(call)
        except BaseException as exc:  # noqa: BLE001 - the caller gets why the new worker failed
            call.put(exc)

    def on_wait(self, call: PendingCall) -> None:
        """A waiting call looks at the streams ahead of it: one nobody reads is stopped."""
        if call.control.phase != "queued":
            return
        for other_rid, other in list(self._streams.items()):
            if other_rid >= call.rid:
                break
            if other.control.phase != Phase.QUEUED and other.reader.preempt():
                self._cancel(other_rid)

    def timed_out(self, call: PendingCall) -> GenerationTimeoutError:
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

    def orphan(self, call: PendingCall) -> None:
        """Forget a call nobody reads and cancel it in the worker."""
        self._handlers.pop(call.rid, None)
        self._cancel(call.rid)

    def finish(self, call: PendingCall) -> None:
        """Forget a call; cancel it in the worker unless it ended."""
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
            write_frame(proc.stdin, Cancel(rid), self._write_lock)
        except (OSError, ValueError):  # ValueError: its pipe was closed (it died just now)
            pass

    @property
    def pid(self) -> int | None:
        """The running worker's process id (None before it started or after it exited)."""
        return self._proc.pid if self._proc is not None and self._proc.poll() is None else None

    def close(self) -> None:
        """End the worker; calls in flight fail and none is sent to a new worker."""
        self._closed = True  # calls still in flight fail; none is sent to a new worker
        proc, self._proc = self._proc, None
        if proc is not None:
            reap(proc, timeout=5)
