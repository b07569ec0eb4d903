"""The inline backend: the model in this process, every generation on a producer thread of its own."""

from __future__ import annotations

import threading
from typing import Any

from ..errors import GenerationTimeoutError
from ..generation.loader import SessionKey
from ..generation.session import Session
from ..package.folder import ModelPackage
from ..request import Request
from .inflight import Backend, PendingCall

__all__ = ["InlineBackend"]


class InlineBackend(Backend):
    """The model in this process.

    Every generation runs on a thread of its own and hands its chunks to the caller's queue, so
    every wait has a deadline, a cancel stops it within a token and an event loop is never blocked.
    """

    def __init__(self, key: SessionKey, package: ModelPackage | None = None) -> None:
        self.session = Session(key, package)

    def call(self, method: str, *args: Any, timeout: float | None = None) -> Any:
        """Run a session method (``load`` returns the load time)."""
        if method == "load":
            self.session.load()
            return self.session.load_seconds
        return getattr(self.session, method)(*args)

    def ensure_loaded(self) -> None:
        """Load the model in this process."""
        self.session.load()

    def precheck(self, request: Request) -> None:
        """Refuse options the model cannot serve, before loading it."""
        self.session.refuse(request.options)

    def launch(self, call: PendingCall) -> None:
        """Start the generation on a producer thread of its own."""
        request, put = call.request, call.put

        def produce() -> None:
            try:
                for chunk in self.session.stream(request.messages, request.options, call.control, call.reader):
                    put(chunk)
                put(None)
            except BaseException as exc:  # noqa: BLE001 - every failure goes to the caller
                put(exc)

        threading.Thread(target=produce, daemon=True, name="ryzenai-inline-generation").start()

    def timed_out(self, call: PendingCall) -> GenerationTimeoutError:
        """Cancel the call (it stops within a token); its timeout error."""
        call.control.cancel.set()
        return call.control.timeout_error()

    def orphan(self, call: PendingCall) -> None:
        """Cancel the call nobody reads."""
        call.control.cancel.set()

    def finish(self, call: PendingCall) -> None:
        """Cancel the call unless it ended."""
        if not call.done:
            call.control.cancel.set()

    def close(self) -> None:
        """Free the session's cached generator."""
        self.session.reset_cache()
