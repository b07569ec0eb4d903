"""The worker protocol: message kinds, named messages, frame I/O, and the one worker bootstrap.

Both ends are this package. A frame is a 4-byte little-endian length and a pickle of a plain
tuple ``(kind, *fields)``: a tuple pickles in a fraction of the time a class instance does, and
:func:`parse_frame` turns it back into its named message. ::

    caller -> worker   Init(spec) | Stream(rid, messages, options, timeout) | Call(rid, method, args)
                       | Cancel(rid) | Run(rid, input_ids, attention_mask, token_type_ids)
    worker -> caller   Ready(info) | Failed(error) | PhaseReport(rid, phase) | Output(rid, chunk)
                       | Delta(rid, text, token_ids) | End(rid) | Result(rid, value) | Error(rid, error)

:func:`serve` is every worker's main: it reads :class:`Init`, opens what the worker serves,
answers :class:`Ready` (or :class:`Failed`), hands every later message to its handler and
exits at once when its input ends.
"""

from __future__ import annotations

import enum
import os
import pickle
import signal
import sys
import threading
from collections.abc import Callable
from typing import IO, TYPE_CHECKING, Any, NamedTuple, NoReturn, Protocol

from .spawn import worker_streams

if TYPE_CHECKING:  # what the messages carry; a worker imports only the side it serves
    import subprocess

    import numpy as np
    from numpy.typing import NDArray

    from .embeddings.runner import SessionSpec
    from .generation.call import Phase
    from .generation.loader import SessionKey
    from .generation.streaming import Chunk
    from .messages import ChatMessage, RawPrompt
    from .options import GenerationOptions
    from .package.folder import ModelPackage

__all__ = [
    "PIPE_BUFFER",
    "Call",
    "Cancel",
    "Delta",
    "End",
    "Error",
    "Failed",
    "Init",
    "Kind",
    "Message",
    "ModelSpec",
    "Output",
    "PhaseReport",
    "ProtocolError",
    "Ready",
    "Result",
    "Run",
    "Send",
    "Served",
    "Stream",
    "parse_frame",
    "portable_exception",
    "read_frame",
    "read_frame_bytes",
    "reap",
    "serve",
    "write_frame",
]

_HEADER = 4
#: Buffer of a worker's stdout in the caller: one read can take all a pipe holds (64 KiB on Linux).
PIPE_BUFFER = 1 << 16


class Kind(enum.IntEnum):
    """What a message is (the first item of its frame)."""

    INIT = 1
    READY = 2
    FAILED = 3
    STREAM = 4
    CALL = 5
    CANCEL = 6
    RUN = 7
    PHASE = 8
    OUTPUT = 9
    DELTA = 10
    END = 11
    RESULT = 12
    ERROR = 13


# -- caller -> worker
class ModelSpec(NamedTuple):
    """What a model worker serves: its session's key, and its package as the caller read it (None: not read).

    The worker reads the folder only if it changed since (see :meth:`~ryzenai_core.package.folder.ModelPackage.reuse`).
    """

    key: SessionKey
    package: ModelPackage | None = None


class Init(NamedTuple):
    """The first frame to a worker: what it serves (a :class:`ModelSpec`, or an encoder's ``SessionSpec``)."""

    spec: ModelSpec | SessionSpec


class Stream(NamedTuple):
    """Generate: :class:`PhaseReport` s, :class:`Delta` s / :class:`Output` s, then :class:`End` or :class:`Error`."""

    rid: int
    messages: list[ChatMessage] | RawPrompt
    options: GenerationOptions
    timeout: float | None = None
    """Seconds from the stream's arrival in the worker (its queue wait included)."""


class Call(NamedTuple):
    """Run a method of what the worker serves: :class:`Result` or :class:`Error`."""

    rid: int
    method: str
    args: tuple[object, ...] = ()


class Cancel(NamedTuple):
    """Stop stream ``rid`` (within a token); nothing if it ended."""

    rid: int


class Run(NamedTuple):
    """Encode one padded batch: :class:`Result` (the vectors) or :class:`Error`."""

    rid: int
    input_ids: NDArray[np.int64]
    attention_mask: NDArray[np.int64]
    token_type_ids: NDArray[np.int64]


# -- worker -> caller
class Ready(NamedTuple):
    """The worker serves; ``info`` is what it says about itself (an encoder: its providers; a model worker: None)."""

    info: list[str] | None = None


class Failed(NamedTuple):
    """The worker could not open what :class:`Init` named (and exits)."""

    error: BaseException


class PhaseReport(NamedTuple):
    """Stream ``rid`` entered a phase (``preparing``, ``prefill``, ``generating``)."""

    rid: int
    phase: Phase


class Output(NamedTuple):
    """A chunk of stream ``rid`` (one that carries more than text and token ids)."""

    rid: int
    chunk: Chunk


class Delta(NamedTuple):
    """A chunk of stream ``rid`` that carries only text and token ids (every token but the last)."""

    rid: int
    text: str
    token_ids: list[int]


class End(NamedTuple):
    """Stream ``rid`` ended."""

    rid: int


class Result(NamedTuple):
    """The value of :class:`Call` or :class:`Run` ``rid`` (what the method or the run returned)."""

    rid: int
    value: Any


class Error(NamedTuple):
    """Request ``rid`` failed (an exception that pickles: see :func:`portable_exception`)."""

    rid: int
    error: BaseException


Message = Init | Stream | Call | Cancel | Run | Ready | Failed | PhaseReport | Output | Delta | End | Result | Error

_TYPES: dict[int, type[Message]] = {
    Kind.INIT: Init,
    Kind.READY: Ready,
    Kind.FAILED: Failed,
    Kind.STREAM: Stream,
    Kind.CALL: Call,
    Kind.CANCEL: Cancel,
    Kind.RUN: Run,
    Kind.PHASE: PhaseReport,
    Kind.OUTPUT: Output,
    Kind.DELTA: Delta,
    Kind.END: End,
    Kind.RESULT: Result,
    Kind.ERROR: Error,
}
#: message type -> its kind as a plain int (an IntEnum member pickles as slowly as a class instance)
_KINDS: dict[type, int] = {cls: int(kind) for kind, cls in _TYPES.items()}
#: kind -> message type, indexed by the int
_BY_KIND: tuple[type[Message] | None, ...] = tuple(_TYPES.get(i) for i in range(max(_TYPES) + 1))


class ProtocolError(ValueError):
    """A frame that is not a message of this protocol."""


def write_frame(stream: IO[bytes], message: Message, lock: threading.Lock | None = None) -> None:
    """Write one message as a frame."""
    data = pickle.dumps((_KINDS[type(message)], *message), protocol=pickle.HIGHEST_PROTOCOL)
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


def parse_frame(data: bytes | memoryview) -> Message:
    """The message in a frame's body.

    Raises:
        ProtocolError: the body is no message of this protocol.
        pickle.UnpicklingError: (and others of ``pickle.loads``) a torn body.
    """
    raw = pickle.loads(data)  # noqa: S301 - frames come from this package's own worker or caller
    try:
        return tuple.__new__(_BY_KIND[raw[0]], raw[1:])  # type: ignore[no-any-return]
    except (IndexError, KeyError, TypeError) as exc:
        raise ProtocolError(f"not a message of the worker protocol: {raw!r:.200}") from exc


def read_frame(stream: IO[bytes]) -> Message | None:
    """Read one message from a blocking stream; None at end of stream."""
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


# ---------------------------------------------------------------------- the worker's side
#: How a worker sends a message to its caller (from any of its threads).
Send = Callable[[Message], None]


class Served(Protocol):
    """What a worker serves once :class:`Init` opened it."""

    @property
    def info(self) -> list[str] | None:
        """What :class:`Ready` carries."""

    def handle(self, message: Message) -> None:
        """One message from the caller (on the thread that reads them: hand long work to another)."""


def serve(open_served: Callable[[Any, Send], Served]) -> NoReturn:
    """A worker's main: serve what :class:`Init` names until the input ends, then exit at once.

    ``open_served(spec, send)`` opens it (an error there goes back as :class:`Failed`). Ctrl-C in
    the terminal reaches the whole process group: the caller handles it (and cancels its calls),
    so the worker ignores it and a frame is never torn. A first frame that is not :class:`Init`
    ends the worker. At the end of the input the worker exits without cancelling anything: a
    cancelled generation would send :class:`End` first, and the caller would take a stream cut
    short for a finished one (it gets a worker error instead).
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    inp, out = worker_streams()  # anything else printed to stdout (native code included) goes to stderr
    lock = threading.Lock()

    def send(message: Message) -> None:
        write_frame(out, message, lock)

    init = read_frame(inp)
    if isinstance(init, Init):
        try:
            served = open_served(init.spec, send)
        except BaseException as exc:  # noqa: BLE001 - the caller raises it; its next call starts a new worker
            send(Failed(portable_exception(exc)))
        else:
            send(Ready(served.info))
            while (message := read_frame(inp)) is not None:
                served.handle(message)
    _exit(out)


def _exit(out: IO[bytes]) -> NoReturn:
    out.flush()
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(0)  # do not wait for a generation nobody will read


# ---------------------------------------------------------------------- the caller's side
def reap(proc: subprocess.Popen[bytes], timeout: float | None = None) -> int:
    """End a worker: close its stdin (it exits at the end of its input), wait, close its stdout.

    A worker still running after ``timeout`` seconds is killed.

    Returns:
        its exit code.
    """
    import subprocess  # the caller's side only (see spawn)

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
