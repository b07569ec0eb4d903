"""The model worker: a process that owns one :class:`~ryzenai_core.generation.session.Session`.

Started by :class:`~ryzenai_core.engine.client.WorkerClient` as ``python -m ryzenai_core.engine.worker``
(not multiprocessing's spawn, which re-runs the user's main module on Windows); it speaks the
messages of :mod:`ryzenai_core.ipc` and runs under its :func:`~ryzenai_core.ipc.serve`.

A generation (:class:`~ryzenai_core.ipc.Stream`) reports its phases (``preparing``,
``prefill``, ``generating``): the caller then knows where a call that ran out of time was, and
which call the worker is busy with. The timeout of a stream counts from its arrival here (a
queue wait included). A chunk that carries only text and token ids (every token but the last)
travels as a :class:`~ryzenai_core.ipc.Delta`: its frame pickles in a fraction of the time a
:class:`~ryzenai_core.generation.streaming.Chunk` does.

Generations run one at a time, in arrival order, on one thread; calls (render, count
tokens, encode, decode) on another, so counting tokens does not wait for a long answer.
Cancel messages are read while a generation runs and stop it within one token. The
worker exits when its stdin closes (the caller exited or closed it).
"""

from __future__ import annotations

import queue
import threading
from typing import Any

from ..generation.call import CallControl, CallSpec, Cancellation, Phase
from ..generation.session import Session
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
    Send,
    Stream,
    portable_exception,
    serve,
)

__all__ = ["CALLS", "ModelWorker", "chunk_message", "main"]


def chunk_message(rid: int, chunk: Chunk) -> Delta | Output:
    """The message for one chunk: a bare :class:`~ryzenai_core.ipc.Delta` when nothing but text and token ids is set."""
    if (
        chunk.finish_reason is None  # a middle chunk: no usage, timings, plan, stop, cut or dropped messages
        and not chunk.reasoning
        and not chunk.tool_calls
        and chunk.usage is None
        and chunk.timings is None
        and chunk.plan is None
        and not chunk.dropped_messages
        and chunk.stop_sequence is None
        and chunk.provider is None
        and chunk.adapter is None
        and not chunk.cut
    ):
        return Delta(rid, chunk.text, chunk.token_ids)
    return Output(rid, chunk)


#: Session methods a caller may run in the worker (besides generations).
CALLS = frozenset({"render", "count_tokens", "count_text", "encode", "decode", "load", "probe", "load_adapter"})


class _PhaseReporter:
    """A stream's phase callback: sends :class:`~ryzenai_core.ipc.PhaseReport` for it."""

    __slots__ = ("rid", "send")

    def __init__(self, send: Send, rid: int) -> None:
        self.send, self.rid = send, rid

    def __call__(self, phase: Phase) -> None:
        self.send(PhaseReport(self.rid, phase))


class ModelWorker:
    """One session, served: generations on one thread, calls on another, cancels at once."""

    info = None

    def __init__(self, spec: ModelSpec, send: Send) -> None:
        self.session = Session(spec.key, spec.package)  # the caller's reading of the package, if still true
        self.send = send
        self.generations: queue.SimpleQueue[Stream] = queue.SimpleQueue()  # C queues: a hand-over without Python locks
        self.calls: queue.SimpleQueue[Call] = queue.SimpleQueue()
        self.cancels: dict[int, Cancellation] = {}
        self.controls: dict[int, CallControl] = {}
        for target in (self._run_generations, self._run_calls):
            threading.Thread(target=target, daemon=True).start()

    def handle(self, message: Message) -> None:
        """Queue a stream or a call; a cancel stops its stream at once."""
        if isinstance(message, Stream):
            cancel = self.cancels.setdefault(message.rid, Cancellation())
            spec = CallSpec.of(message.options, message.timeout)
            control = self.controls[message.rid] = CallControl(spec, cancel, _PhaseReporter(self.send, message.rid))
            control.start_clock()  # the timeout counts from its arrival here (a queue wait included)
            self.generations.put(message)
        elif isinstance(message, Call):
            self.calls.put(message)
        elif isinstance(message, Cancel) and (stop := self.cancels.get(message.rid)) is not None:
            stop.set()

    def _run_generations(self) -> None:
        send, session = self.send, self.session
        while True:
            item = self.generations.get()
            rid = item.rid
            control = self.controls.pop(rid)
            try:
                for chunk in session.stream(item.messages, item.options, control):
                    send(chunk_message(rid, chunk))
                send(End(rid))
            except BaseException as exc:  # noqa: BLE001 - every failure goes back to the caller
                send(Error(rid, portable_exception(exc)))
            finally:
                self.cancels.pop(rid, None)

    def _run_calls(self) -> None:
        while True:
            item = self.calls.get()
            try:
                if item.method not in CALLS:
                    raise ValueError(f"unknown worker call {item.method!r}")
                value: Any
                if item.method == "load":
                    self.session.load()
                    value = self.session.load_seconds
                else:
                    value = getattr(self.session, item.method)(*item.args)
                self.send(Result(item.rid, value))
            except BaseException as exc:  # noqa: BLE001
                self.send(Error(item.rid, portable_exception(exc)))


def main() -> None:
    """Serve one model until stdin closes."""
    serve(ModelWorker)


if __name__ == "__main__":
    main()
