"""The model worker: a process that owns one :class:`~ryzenai_core.generation.session.Session`.

Started by :class:`~ryzenai_core.engine.client.WorkerClient` as ``python -m ryzenai_core.engine.worker``
(not multiprocessing's spawn, which re-runs the user's main module on Windows). Frames on
stdin/stdout are a 4-byte little-endian length and a pickle (both ends are this package)::

    caller -> worker   ("init", key) | ("stream", id, messages, options, timeout)
                       | ("call", id, method, args) | ("cancel", id)
    worker -> caller   ("ready",) | ("failed", exception) | ("phase", id, name) | ("chunk", id, Chunk)
                       | ("delta", id, text, token_ids) | ("end", id) | ("result", id, value)
                       | ("error", id, exception)

A generation reports its phases (``preparing``, ``prefill``, ``generating``): the caller
then knows where a call that ran out of time was, and which call the worker is busy with.
The timeout of a stream counts from its arrival here (a queue wait included).

A chunk that carries only text and token ids (every token but the last) travels as a
"delta" tuple: a tuple pickles in a fraction of the time a dataclass does.

Generations run one at a time, in arrival order, on one thread; calls (render, count
tokens, encode, decode) on another, so counting tokens does not wait for a long answer.
Cancel messages are read while a generation runs and stop it within one token. The
worker exits when its stdin closes (the caller exited or closed it).
"""

from __future__ import annotations

import functools
import os
import queue
import signal
import threading
from typing import Any

from ..generation.call import CallControl, CallSpec, Cancellation
from ..generation.streaming import Chunk
from ..ipc import portable_exception as _portable
from ..ipc import read_frame, write_frame
from ..spawn import worker_streams

__all__ = ["main"]


def _wire(rid: int, chunk: Chunk) -> tuple[Any, ...]:
    """The frame for one chunk: a bare delta when nothing but text and token ids is set."""
    if (
        chunk.finish_reason is None  # a middle chunk: no usage, timings, plan, stop or dropped messages
        and not chunk.reasoning
        and not chunk.tool_calls
        and chunk.usage is None
        and chunk.timings is None
        and chunk.plan is None
        and not chunk.dropped_messages
        and chunk.stop_sequence is None
        and chunk.provider is None
    ):
        return ("delta", rid, chunk.text, chunk.token_ids)
    return ("chunk", rid, chunk)


#: Session methods a caller may run in the worker (besides generations).
_CALLS = frozenset({"render", "count_tokens", "count_text", "encode", "decode", "load"})


def _send_phase(send: Any, rid: int, phase: str) -> None:
    send(("phase", rid, str(phase)))  # the wire carries the plain value


def main() -> None:
    """Serve one model until stdin closes."""
    # Ctrl-C in the terminal reaches the whole process group: the caller handles it (and
    # cancels the call); the worker must not die of it.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    inp, out = worker_streams()  # anything else printed to stdout (native code included) goes to stderr
    lock = threading.Lock()

    def send(message: Any) -> None:
        write_frame(out, message, lock)

    init = read_frame(inp)
    if init is None or init[0] != "init":
        return
    from ..generation.session import Session

    try:
        session = Session(init[1])
    except BaseException as exc:  # noqa: BLE001 - the caller raises it; its next call starts a new worker
        send(("failed", _portable(exc)))
        return
    send(("ready",))

    generations: queue.SimpleQueue[Any] = queue.SimpleQueue()  # C queues: a hand-over without Python locks
    calls: queue.SimpleQueue[Any] = queue.SimpleQueue()
    cancels: dict[int, Cancellation] = {}
    controls: dict[int, CallControl] = {}

    def run_generations() -> None:
        while True:
            item = generations.get()
            if item is None:
                return
            rid, messages, options = item[1], item[2], item[3]
            control = controls.pop(rid)
            try:
                for chunk in session.stream(messages, options, control):
                    send(_wire(rid, chunk))
                send(("end", rid))
            except BaseException as exc:  # noqa: BLE001 - every failure goes back to the caller
                send(("error", rid, _portable(exc)))
            finally:
                cancels.pop(rid, None)

    def run_calls() -> None:
        while True:
            item = calls.get()
            if item is None:
                return
            _, rid, method, args = item
            try:
                if method not in _CALLS:
                    raise ValueError(f"unknown worker call {method!r}")
                value: Any
                if method == "load":
                    session.load()
                    value = session.load_seconds
                else:
                    value = getattr(session, method)(*args)
                send(("result", rid, value))
            except BaseException as exc:  # noqa: BLE001
                send(("error", rid, _portable(exc)))

    threads = [threading.Thread(target=run_generations, daemon=True), threading.Thread(target=run_calls, daemon=True)]
    for t in threads:
        t.start()
    while True:
        msg = read_frame(inp)
        if msg is None:
            break
        kind = msg[0]
        if kind == "stream":
            rid = msg[1]
            cancel = cancels.setdefault(rid, Cancellation())
            spec = CallSpec.of(msg[3], msg[4] if len(msg) > 4 else None)
            control = controls[rid] = CallControl(spec, cancel, functools.partial(_send_phase, send, rid))
            control.start_clock()
            generations.put(msg)
        elif kind == "call":
            calls.put(msg)
        elif kind == "cancel" and (event := cancels.get(msg[1])) is not None:
            event.set()
    # Exit at once, without cancelling: a cancelled generation would send "end" first, and the
    # caller would take a stream cut short for a finished one (it gets WorkerDiedError instead).
    out.flush()
    os._exit(0)  # do not wait for a generation nobody will read


if __name__ == "__main__":
    main()
