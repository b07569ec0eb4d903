"""The worker client: a model in a worker process (:mod:`ryzenai_core.engine.worker`).

The worker's start, its reader thread, deadlines and replacement are every worker's
(:class:`~ryzenai_core.workers.WorkerConnection`); here are a generation's: a call whose worker
died before any output is sent again to a new worker; a worker that cannot stop a call that ran
out of time is replaced; calls (render, count tokens, ...) and the load have the workers' deadlines.
"""

from __future__ import annotations

import os
import subprocess
import threading
from typing import Any

from ..errors import GenerationTimeoutError, WorkerDiedError
from ..generation.call import Phase
from ..generation.loader import SessionKey
from ..generation.streaming import Chunk
from ..ipc import (
    Call,
    Cancel,
    Delta,
    End,
    Error,
    Message,
    ModelSpec,
    Output,
    PhaseReport,
    Result,
    Stream,
    write_frame,
)
from ..messages import RawPrompt
from ..package.folder import ModelPackage
from ..workers import Deadline, WorkerConnection
from .inflight import Backend, PendingCall

__all__ = ["STUCK_GRACE", "WorkerClient"]

#: Seconds a worker may take to stop a call that ran out of time before it is replaced by a new one.
STUCK_GRACE = float(os.environ.get("RYZENAI_LLM_STUCK_GRACE", "10"))


class WorkerClient(WorkerConnection, Backend):
    """Talks to a worker process; restarts it on the next call after it died.

    A call that runs out of its timeout is cancelled; if the worker does not finish it
    within :data:`STUCK_GRACE` seconds (a call stuck outside the token loop), the worker is
    replaced, so the model is usable again. Calls that were still waiting in its queue are
    sent to the new worker.

    One reader thread per worker reads every frame and hands it to its call (sync, async or
    concurrent alike); a caller only ever waits on its own queue, with its deadline.

    Its state is written by callers, resends, the reader thread and stuck-call timers, each
    part under one lock: the worker process (``_proc``) under ``_start_lock``; the tables of
    requests in flight (``_handlers``, ``_sent_to``, ``_streams``), the stream the worker runs
    (``_running``), the worker the model was loaded in and the phase of every stream it sent
    (the worker's reports move it on) under ``_lock``; frames to the worker under
    ``_write_lock``. A handler is called outside ``_lock`` (it may resend, which takes it).
    """

    module = "ryzenai_core.engine.worker"
    what = "model worker"

    def __init__(self, key: SessionKey, package: ModelPackage | None = None) -> None:
        """A worker for ``key``'s model; ``package``, read here already, is handed to it (see ``ModelSpec``)."""
        super().__init__(ModelSpec(key, package))
        self.key = key
        self._streams: dict[int, PendingCall] = {}  # open streams, oldest first
        self._running: int | None = None  # the stream the worker is working on
        self._loaded_pid: int | None = None

    # -- process management
    def environment(self) -> dict[str, str] | None:
        """The worker's environment: the Ryzen AI EP library found here, named to it.

        See :func:`~ryzenai_core.package.ep.worker_environment`.
        """
        from ..package.ep import worker_environment

        return worker_environment()

    def ensure_loaded(self) -> None:
        """Load the model in the worker before a timed call (the load has its own deadline, no call's timeout)."""
        proc = self._ensure()
        if self._loaded_pid != proc.pid:
            self.call("load")
            with self._lock:
                self._loaded_pid = proc.pid

    def _dispatch(self, msg: Message) -> None:
        """Hand a message from the worker to its call."""
        if isinstance(msg, PhaseReport):
            with self._lock:
                self._running = msg.rid
                stream = self._streams.get(msg.rid)
                if stream is not None:
                    stream.control.phase = msg.phase
            return
        if isinstance(msg, (End, Error)):
            with self._lock:
                if self._running == msg.rid:
                    self._running = None
        elif not isinstance(msg, (Delta, Output, Result)):
            return  # nothing a call waits for (a worker speaks first only once)
        super()._dispatch(msg)

    def _died(self, proc: subprocess.Popen[bytes]) -> None:
        """The worker's pipe ended: it runs nothing now; its calls fail."""
        with self._lock:
            if self._running is not None and self._sent_to.get(self._running) == proc.pid:
                self._running = None
        super()._died(proc)

    def _forget(self, rid: int) -> None:
        super()._forget(rid)
        with self._lock:
            self._streams.pop(rid, None)

    # -- calls
    def call(self, method: str, *args: Any, timeout: float | None = None) -> Any:
        """Run a session method in the worker and wait for its result.

        Within ``timeout`` seconds if given, else the workers' deadline: the load's
        (:data:`~ryzenai_core.workers.LOAD_TIMEOUT`) for ``load`` and for any call before the
        model is loaded in this worker (the call loads it), else :data:`~ryzenai_core.workers.CALL_TIMEOUT`.
        A worker that has not answered :data:`STUCK_GRACE` seconds after that is replaced.
        """
        if timeout is not None:
            deadline = Deadline(timeout, "timeout")
        elif method == "load" or self._loaded_pid is None or self._loaded_pid != self.pid:
            deadline = Deadline.load()
        else:
            deadline = Deadline.call()
        return self.request(
            lambda rid: Call(rid, method, args), deadline, doing=f"the call {method}()", phase=method, grace=STUCK_GRACE
        )

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
        with self._lock:
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
        if not self._waiting(call.rid):
            return
        control = call.control
        # Loading the model in the new worker is no part of the call's time (as on a first call).
        # "queued" first: the caller then looks again every QUEUED_POLL seconds, so it sees the
        # deadline come back (it would otherwise block without one).
        with self._lock:
            control.phase = Phase.QUEUED
        try:
            with control.cancel.paused():
                self.ensure_loaded()
            if self._waiting(call.rid):  # its caller may have left during the load
                self.launch(call)
        except BaseException as exc:  # noqa: BLE001 - the caller gets why the new worker failed
            call.put(exc)

    def on_wait(self, call: PendingCall) -> None:
        """A waiting call looks at the streams ahead of it: one nobody reads is stopped."""
        if call.control.phase != Phase.QUEUED:
            return
        with self._lock:
            ahead = [(rid, other) for rid, other in self._streams.items() if rid < call.rid]
        for other_rid, other in ahead:
            if other.control.phase != Phase.QUEUED and other.reader.preempt():
                self._cancel(other_rid)

    def timed_out(self, call: PendingCall) -> GenerationTimeoutError:
        """Cancel a call that ran out of time; replace the worker if it cannot stop it."""
        self._cancel(call.rid)
        if call.control.phase != Phase.QUEUED:
            rid = call.rid
            self.stop_if_stuck(self._proc, STUCK_GRACE, lambda: self._runs(rid), "a generation")
        return call.control.timeout_error()

    def _runs(self, rid: int) -> bool:
        with self._lock:
            return self._running == rid

    def orphan(self, call: PendingCall) -> None:
        """Forget a call nobody reads and cancel it in the worker."""
        with self._lock:
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
