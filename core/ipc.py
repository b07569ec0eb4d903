"""Length-prefixed pickle frames between the engines and their worker processes, and ending a worker."""

from __future__ import annotations

import pickle
import subprocess
import threading
from typing import IO, Any

__all__ = ["parse_frame", "portable_exception", "read_frame", "read_frame_bytes", "reap", "write_frame"]

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
