"""The embedding worker: a process that owns one onnxruntime session of an embedding model.

Started by :class:`~ryzenai_core.embeddings.embedding.EmbeddingEngine` as
``python -m ryzenai_core.embeddings.worker`` (one per static shape on the NPU: several
VitisAI sessions in one process break each other, and an execution provider that crashes
takes only this process with it). Frames are :mod:`ryzenai_core.ipc`::

    caller -> worker   ("init", SessionSpec) | ("run", id, input_ids, attention_mask, token_type_ids)
    worker -> caller   ("ready", providers) | ("failed", exception) | ("result", id, vectors)
                       | ("error", id, exception)

Runs are served one at a time; the worker exits when its stdin closes.
"""

from __future__ import annotations

import signal
from typing import Any

from ..ipc import portable_exception, read_frame, write_frame
from ..spawn import worker_streams

__all__ = ["main"]


def main() -> None:
    """Serve one session until stdin closes."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the caller's to handle
    inp, out = worker_streams()  # anything else printed to stdout (native code included) goes to stderr

    def send(message: Any) -> None:
        write_frame(out, message)

    init = read_frame(inp)
    if init is None or init[0] != "init":
        return
    from .runner import Runner

    try:
        runner = Runner(init[1])
    except BaseException as exc:  # noqa: BLE001 - the caller raises it
        send(("failed", portable_exception(exc)))
        return
    send(("ready", runner.providers))
    while (msg := read_frame(inp)) is not None:
        if msg[0] != "run":
            continue
        try:
            send(("result", msg[1], runner.run(msg[2], msg[3], msg[4])))
        except BaseException as exc:  # noqa: BLE001 - every failure goes back to the caller
            send(("error", msg[1], portable_exception(exc)))
    out.flush()


if __name__ == "__main__":
    main()
