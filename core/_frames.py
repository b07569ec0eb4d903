"""Length-prefixed pickle frames between the engines and their worker processes, and ending a worker."""

from __future__ import annotations

import io
import os
import pickle
import select
import subprocess
import threading
from typing import IO, Any

__all__ = ["FramePipe", "parse_frame", "portable_exception", "read_frame", "read_frame_bytes", "reap", "write_frame"]

_HEADER = 4
#: Buffer of a worker's stdout in the caller: one read can take all a pipe holds (64 KiB on Linux).
PIPE_BUFFER = 1 << 16


def write_frame(stream: IO[bytes], message: Any, lock: threading.Lock | None = None) -> None:
    """Write one frame."""
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    frame = len(data).to_bytes(_HEADER, "little") + data
    if lock is None:
        stream.write(frame)
        stream.flush()
        return
    with lock:
        stream.write(frame)
        stream.flush()


def _read_exact(stream: IO[bytes], n: int) -> bytes | None:
    buf = stream.read(n)  # a buffered stream returns all n bytes at once (less only at its end)
    if len(buf) == n:
        return buf
    if not buf:
        return None
    while len(buf) < n:
        part = stream.read(n - len(buf))
        if not part:
            return None
        buf += part
    return buf


def read_frame_bytes(stream: IO[bytes]) -> bytes | None:
    """Read one frame's body from a blocking stream; None at end of stream (or in a frame cut short)."""
    header = _read_exact(stream, _HEADER)
    if header is None:
        return None
    return _read_exact(stream, int.from_bytes(header, "little"))


def parse_frame(data: bytes | memoryview) -> Any:
    """The message in a frame's body."""
    return pickle.loads(data)  # noqa: S301 - frames come from this package's own worker or caller


def read_frame(stream: IO[bytes]) -> Any:
    """Read one frame from a blocking stream; None at end of stream."""
    data = read_frame_bytes(stream)
    return None if data is None else parse_frame(data)


#: :meth:`FramePipe.head`: nothing buffered and nothing to read now / part of a frame so far.
EMPTY = "empty"
PARTIAL = "partial"
#: No frame is this large: a header that says so was not written as one (a torn pipe).
MAX_FRAME = 1 << 30


def _check_header(data: bytes | bytearray, have: int) -> int:
    """The frame's size from its header; raises for bytes that cannot start a frame (a pickle starts with PROTO)."""
    size = _HEADER + int.from_bytes(data[:_HEADER], "little")
    if size > MAX_FRAME or (have > _HEADER and data[_HEADER] != pickle.PROTO[0]):
        raise pickle.UnpicklingError(f"a torn frame (header {bytes(data[:_HEADER + 1]).hex()})")
    return size


class FramePipe:
    """A worker's stdout read without blocking (POSIX), so that threads can take turns reading it.

    A frame is looked at in the buffered reader's buffer (:meth:`head`) and consumed whole in
    one call (:meth:`consume`), which reads nothing from the system: an exception between two
    steps of a reading thread (a KeyboardInterrupt in the main thread) can lose a frame that
    thread already took, never leave the pipe in the middle of one. Callers let one thread at
    a time read; :meth:`read_whole` (waits for the rest of a frame that is still arriving) is for
    a thread no signal interrupts.
    """

    def __init__(self, stdout: io.BufferedReader) -> None:
        self.stdout = stdout
        self.fd = stdout.fileno()
        os.set_blocking(self.fd, False)
        self._poll = select.poll()
        self._poll.register(self.fd, select.POLLIN)
        self._have = 0  # bytes buffered when head() last looked
        #: True only when nothing is buffered for sure (the last frame taken was all there was):
        #: a reader can then wait on the pipe before it looks (no read that finds nothing).
        self.drained = False

    def head(self) -> tuple[int, memoryview] | str:
        """The first frame if it is all buffered: (its size, its body), not consumed; else EMPTY or PARTIAL.

        Reads from the pipe (once, without blocking) only when nothing is buffered. EMPTY right
        after a poll said the pipe was readable means its end (the worker is gone).

        Raises:
            pickle.UnpicklingError: the buffer does not start with a frame (a torn pipe).
        """
        self.drained = False
        view = self.stdout.peek(_HEADER)  # every buffered byte, or what one read finds now
        have = self._have = len(view)
        if have < _HEADER:
            return PARTIAL if have else EMPTY
        size = _check_header(view, have)
        if have < size:
            return PARTIAL
        return size, memoryview(view)[_HEADER:size]

    def consume(self, size: int) -> None:
        """Drop the first frame (``size`` bytes, all buffered: no read from the system)."""
        self.stdout.read(size)
        self.drained = size == self._have

    def read_whole(self) -> bytes | None:
        """The first frame's body, waiting for the rest of it; None at the end of the pipe."""
        self.drained = False  # what the reads below leave buffered is not known
        data = bytearray()
        need = _HEADER
        while len(data) < need:
            part = self.stdout.read(need - len(data))  # what is buffered or readable now; None: nothing yet
            if part is None:
                self._poll.poll()
                continue
            if not part:
                return None  # the end, maybe in the middle of a frame (the worker died writing it)
            data += part
            if need == _HEADER and len(data) == _HEADER:
                need = _check_header(data, _HEADER)
            if len(data) > _HEADER:
                _check_header(data, len(data))
        return bytes(data[_HEADER:])


def portable_exception(exc: BaseException) -> BaseException:
    """The exception itself if it pickles, else a GenerationError with its text (for a frame)."""
    from .errors import GenerationError

    try:
        pickle.loads(pickle.dumps(exc))  # noqa: S301 - our own bytes
        return exc
    except Exception:  # noqa: BLE001
        return GenerationError(f"{type(exc).__name__}: {exc}")


def reap(proc: subprocess.Popen[bytes], timeout: float | None = None) -> int:
    """End a worker: close its stdin (it exits at the end of its input), wait, close its stdout.

    A worker still running after ``timeout`` seconds is killed.

    Returns:
        its exit code.
    """
    _close(proc.stdin)
    try:
        code = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        code = proc.wait()
    _close(proc.stdout)
    return code


def _close(pipe: IO[bytes] | None) -> None:
    try:
        if pipe is not None:
            pipe.close()
    except OSError:  # a pipe already broken
        pass
