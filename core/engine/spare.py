"""A model worker started before any model is named, so the first call finds it started.

A worker's own start (an interpreter and the core's modules) is most of what a process's first
call pays beyond the model's load and first token. So the first LLM model object built in a
process whose models run in workers (the default) starts one worker process at once
(:func:`start_spare`): it imports its modules while the caller goes on (building its chain,
importing the rest of the engine, opening the package), then waits for its first frame. The
next worker an engine starts is that one (:func:`take_spare`); it opens a package only when
:class:`~ryzenai_core.ipc.Init` names one, so building a model object still opens and loads nothing.

- One at a time: building more model objects while one waits starts no other.
- Only in the process that started it: a forked child starts its own.
- Only with the environment it started with: a variable the runtime reads, set after the model
  object was built, would be missing from it, so a spare started before any change is stopped and
  a new worker started instead.
- A spare nobody took is stopped at exit (it holds nothing).
"""

from __future__ import annotations

import atexit
import logging
import os
import subprocess
import threading
from dataclasses import dataclass, field

from ..ipc import PIPE_BUFFER
from ..spawn import popen_worker

__all__ = ["WORKER_MODULE", "start_spare", "start_worker", "stop_spare", "take_spare", "waiting_pid"]

logger = logging.getLogger(__name__)

#: The module a model worker runs.
WORKER_MODULE = "ryzenai_core.engine.worker"


@dataclass(frozen=True)
class _Spare:
    proc: subprocess.Popen[bytes]
    owner: int  # the pid of the process that started it
    environ: dict[str, str] = field(repr=False)


_lock = threading.Lock()
_spare: _Spare | None = None


def start_worker() -> subprocess.Popen[bytes]:
    """A new model worker process (it imports its modules, then waits for :class:`~ryzenai_core.ipc.Init`)."""
    return popen_worker(WORKER_MODULE, bufsize=PIPE_BUFFER)


def start_spare() -> None:
    """Start a model worker ahead of the first call, unless one is already waiting.

    A worker that cannot be started now (no process left to the user, say) is no error here:
    the first call starts its worker and says why it cannot.
    """
    global _spare
    with _lock:
        if _spare is not None and _spare.owner == os.getpid() and _spare.proc.poll() is None:
            return
        try:
            proc = start_worker()
        except OSError as exc:
            logger.debug("no model worker started ahead: %s", exc)
            return
        _spare = _Spare(proc, os.getpid(), dict(os.environ))


def waiting_pid() -> int | None:
    """The process id of the worker started ahead and not taken yet (None: none waits)."""
    spare = _spare
    return spare.proc.pid if spare is not None and spare.owner == os.getpid() and spare.proc.poll() is None else None


def take_spare() -> subprocess.Popen[bytes] | None:
    """The waiting worker, for an engine that starts one (None: there is none, or it cannot serve)."""
    global _spare
    with _lock:
        spare, _spare = _spare, None
    if spare is None or spare.owner != os.getpid():  # a forked child leaves its parent's spare alone
        return None
    if spare.proc.poll() is not None or spare.environ != dict(os.environ):
        _stop(spare.proc)
        return None
    return spare.proc


def stop_spare() -> None:
    """Stop the waiting worker, if any (at exit)."""
    global _spare
    with _lock:
        spare, _spare = _spare, None
    if spare is not None and spare.owner == os.getpid():
        _stop(spare.proc)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """End a worker that was never given a model (it holds nothing: killing it loses nothing)."""
    if proc.poll() is None:
        proc.kill()
    proc.wait()
    for pipe in (proc.stdin, proc.stdout):
        if pipe is not None:
            try:
                pipe.close()
            except OSError:
                pass


atexit.register(stop_spare)
