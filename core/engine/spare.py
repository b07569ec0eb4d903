"""A model worker started before any model is named, so the first call finds it started.

A worker's own start (an interpreter and the core's modules) is most of what a process's first
call pays beyond the model's load and first token. So one worker process starts ahead, when
none is waiting (:func:`start_spare`): it imports its modules while the caller goes on, then
waits for its first frame. The next worker an engine starts is that one (:func:`take_spare`);
it opens a package only when :class:`~ryzenai_core.ipc.Init` names one, so nothing is opened or
loaded before a call. It starts

- when a face's LLM class is first read from its package (the face calls
  :func:`start_spare_ahead`), before the framework's own import (0.5-1.5 s), which it then runs
  beside: unless :data:`~ryzenai_core.call_options.ENV_EXECUTION` says ``inline`` at that time,
  or the process is a multiprocessing child importing its parent's main module;
- when an LLM model object whose model runs in a worker (the default) is built, if none waits
  then (the one started at the import was taken, or stopped after a change below).

- One at a time: a model object built while one waits starts no other (so at most one process
  waits unused: one started for a model whose engine already has its worker).
- Not kept for inline models: the first model object built, if it runs inline
  (``execution="inline"``), stops the one its class's import started (:func:`drop_ahead`).
- Only in the process that started it: a forked child closes its copy of the pipes (the worker
  then still sees its input end when its caller closes it) and starts its own.
- Only with the environment and working folder it started with: any change to ``os.environ``
  after it started (a variable the runtime reads, or ``load_dotenv()`` after the imports) or of
  the working folder (a relative path would lead elsewhere) stops it at the next model object
  or call, and a new worker starts instead: set the environment before the import to keep it.
- Not in a process that is itself a worker (a frozen app that runs its main as a worker because
  it does not call ``freeze_support`` first would otherwise start one more at each start).
- A spare nobody took is stopped at exit (it holds nothing but an interpreter, the core's
  modules and numpy: about 40 MB).
"""

from __future__ import annotations

import atexit
import dataclasses
import logging
import os
import subprocess
import sys
import threading
from dataclasses import dataclass, field

from ..call_options import llm_execution
from ..ipc import PIPE_BUFFER
from ..spawn import WORKER_FLAG, popen_worker

__all__ = [
    "WORKER_MODULE",
    "drop_ahead",
    "start_spare",
    "start_spare_ahead",
    "start_worker",
    "stop_spare",
    "take_spare",
    "waiting_pid",
]

logger = logging.getLogger(__name__)

#: The module a model worker runs.
WORKER_MODULE = "ryzenai_core.engine.worker"


@dataclass(frozen=True)
class _Spare:
    proc: subprocess.Popen[bytes]
    owner: int  # the pid of the process that started it
    cwd: str
    environ: dict[str, str] = field(repr=False)
    ahead: bool = False  # started when an LLM class was imported, before any model object

    def waits(self) -> bool:
        """Whether it is this process's and still running."""
        return self.owner == os.getpid() and self.proc.poll() is None

    def serves(self) -> bool:
        """Whether it can serve this process now: waiting, started in today's folder and environment."""
        return self.waits() and self.cwd == _cwd() and self.environ == dict(os.environ)


def _cwd() -> str | None:
    """The working folder (None: it was deleted, and a worker started now could not resolve a relative path)."""
    try:
        return os.getcwd()
    except OSError:
        return None


def _inheriting() -> bool:
    """Whether this is a multiprocessing child (spawn, forkserver) importing its parent's main module."""
    process = sys.modules.get("multiprocessing.process")
    return process is not None and bool(getattr(process.current_process(), "_inheriting", False))


_lock = threading.Lock()
_spare: _Spare | None = None


def start_worker() -> subprocess.Popen[bytes]:
    """A new model worker process (it imports its modules, then waits for :class:`~ryzenai_core.ipc.Init`).

    Its environment names the Ryzen AI EP library found here (see :func:`~ryzenai_core.package.ep.worker_environment`).
    """
    from ..package.ep import worker_environment

    return popen_worker(WORKER_MODULE, bufsize=PIPE_BUFFER, env=worker_environment())


def start_spare(*, ahead: bool = False) -> None:
    """Start a model worker ahead of the first call, unless one is already waiting.

    A worker that cannot be started now (no process left to the user, a working folder that
    was deleted) is no error here: the first call starts its worker and says why it cannot.
    """
    global _spare
    if WORKER_FLAG in sys.argv:
        return
    with _lock:
        if _spare is not None and _spare.serves():
            if _spare.ahead and not ahead:
                _spare = dataclasses.replace(_spare, ahead=False)  # a model object counts on it now
            return
        stale, _spare = _spare, None
        if stale is not None and stale.owner == os.getpid():
            _stop(stale.proc)
        cwd, environ = _cwd(), dict(os.environ)
        if cwd is None:
            return
        try:
            proc = start_worker()
        except OSError as exc:
            logger.debug("no model worker started ahead: %s", exc)
            return
        _spare = _Spare(proc, os.getpid(), cwd, environ, ahead)


def start_spare_ahead() -> None:
    """Start a model worker when a face's LLM class is imported.

    Not when LLMs run inline here by default (:data:`~ryzenai_core.call_options.ENV_EXECUTION`),
    nor in a multiprocessing child while it imports its parent's main module (a pool of spawned
    processes would otherwise start one worker each, for models they may never build).
    """
    if llm_execution(None) == "process" and not _inheriting():
        start_spare(ahead=True)


def drop_ahead() -> None:
    """Stop the worker an import started when the first model object built runs inline (it would wait unused)."""
    global _spare
    with _lock:
        spare = _spare
        if spare is None or not spare.ahead or spare.owner != os.getpid():
            return
        _spare = None
    _stop(spare.proc)


def waiting_pid() -> int | None:
    """The process id of the worker started ahead and not taken yet (None: none waits)."""
    spare = _spare
    return spare.proc.pid if spare is not None and spare.waits() else None


def take_spare() -> subprocess.Popen[bytes] | None:
    """The waiting worker, for an engine that starts one (None: there is none, or it cannot serve)."""
    global _spare
    with _lock:
        spare, _spare = _spare, None
    if spare is None or spare.owner != os.getpid():
        return None
    if not spare.serves():
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
    _close_pipes(proc)


def _close_pipes(proc: subprocess.Popen[bytes]) -> None:
    """Close this process's ends of a worker's pipes."""
    for pipe in (proc.stdin, proc.stdout):
        if pipe is not None:
            try:
                pipe.close()
            except OSError:
                pass


#: Spares a forked child inherited: their pipes closed, kept so that no warning says they still run.
_inherited: list[subprocess.Popen[bytes]] = []


def _after_fork_in_child() -> None:
    """In a forked child: close its copies of the spare's pipes and forget it (the parent's to use)."""
    global _spare, _lock
    _lock = threading.Lock()  # another thread of the parent may have held it at the fork
    spare, _spare = _spare, None
    if spare is not None:
        _close_pipes(spare.proc)
        _inherited.append(spare.proc)


atexit.register(stop_spare)
if hasattr(os, "register_at_fork"):  # POSIX
    os.register_at_fork(after_in_child=_after_fork_in_child)
