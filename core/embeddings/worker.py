"""The embedding worker: a process that owns one onnxruntime session of an embedding model.

Started by :class:`~ryzenai_core.embeddings.runner.WorkerBackend` as
``python -m ryzenai_core.embeddings.worker`` (one per static shape on the NPU: several
VitisAI sessions in one process break each other, and an execution provider that crashes
takes only this process with it). It speaks the messages of :mod:`ryzenai_core.ipc` under its
:func:`~ryzenai_core.ipc.serve`: :class:`~ryzenai_core.ipc.Init` with a
:class:`~ryzenai_core.embeddings.runner.SessionSpec`, answered by
:class:`~ryzenai_core.ipc.Ready` with the session's providers; then each
:class:`~ryzenai_core.ipc.Run` by :class:`~ryzenai_core.ipc.Result` (the vectors) or
:class:`~ryzenai_core.ipc.Error`.

Runs are served one at a time; the worker exits when its stdin closes.
"""

from __future__ import annotations

from ..ipc import Error, Message, Result, Run, Send, portable_exception, serve
from .runner import Runner, SessionSpec

__all__ = ["EncoderWorker", "main"]


class EncoderWorker:
    """One session, served: each run on the thread that reads them (runs come one at a time)."""

    def __init__(self, spec: SessionSpec, send: Send) -> None:
        self.runner = Runner(spec)
        self.send = send
        self.info = self.runner.providers

    def handle(self, message: Message) -> None:
        """Run one batch; anything but a run is ignored."""
        if not isinstance(message, Run):
            return
        try:
            self.send(
                Result(message.rid, self.runner.run(message.input_ids, message.attention_mask, message.token_type_ids))
            )
        except BaseException as exc:  # noqa: BLE001 - every failure goes back to the caller
            self.send(Error(message.rid, portable_exception(exc)))


def main() -> None:
    """Serve one session until stdin closes."""
    serve(EncoderWorker)


if __name__ == "__main__":
    main()
