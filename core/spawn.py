"""How a worker process starts, from any host: a console, ``pythonw``, a GUI host, a frozen app.

- **Standard error.** A worker's stderr is the caller's when the caller has one; a caller with
  none (``pythonw``, a GUI host, a service: file descriptor 2 closed or invalid) gives its workers
  the null device. Inheriting a closed descriptor 2 would make the worker's stderr whatever the
  caller's descriptor 2 is at the time (on POSIX the pipe to the worker itself: native code
  printing a warning then corrupts the frames); on Windows a pipe with no reader.
- **No console window per worker** (Windows): a caller without a console (a GUI host, a Jupyter
  kernel started without one) starts its workers with ``CREATE_NO_WINDOW``; ``python.exe`` would
  otherwise open a console window for each. A caller with a console shares it with its workers.
- **Frozen apps** (``sys.frozen``: PyInstaller, cx_Freeze, py2exe): ``sys.executable`` is the app,
  not an interpreter, so ``-m module`` means nothing to it. A worker is then started as
  ``<app> --ryzenai-worker <module>``, which :func:`freeze_support` (called first thing in the app's
  entry point, as ``multiprocessing.freeze_support``) turns into the worker: it runs the module by
  name, as ``-m`` does. (Not on import: a worker run inside the import of ``ryzenai_core`` would
  deadlock its own threads' imports.) The package's ``__init__`` names the worker modules, so a
  freezer that follows imports bundles them.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any, BinaryIO

if TYPE_CHECKING:  # the caller's side imports it when it starts a worker; a worker does not
    import subprocess

__all__ = [
    "WORKER_FLAG",
    "creation_flags",
    "freeze_support",
    "popen_worker",
    "worker_command",
    "worker_stderr",
    "worker_streams",
]

#: The argument that makes a frozen app run a worker instead of itself.
WORKER_FLAG = "--ryzenai-worker"
#: The modules a worker runs.
WORKER_MODULES = ("ryzenai_core.engine.worker", "ryzenai_core.embeddings.worker")
CREATE_NO_WINDOW = 0x08000000  # subprocess.CREATE_NO_WINDOW, which exists on Windows only


def _stderr_open() -> bool:
    """Whether file descriptor 2 is open (False when closed or invalid)."""
    try:
        os.fstat(2)
    except (OSError, ValueError):
        return False
    return True


#: Whether descriptor 2 was open when this package was imported: a host that had none then has none.
_STDERR_AT_IMPORT = _stderr_open()


def worker_stderr() -> int | None:
    """The ``stderr`` argument for a worker: None (the caller's) or ``subprocess.DEVNULL``.

    The caller's stderr only when the interpreter started with one (``sys.__stderr__``), it was
    open when this package was imported and it is open now: a descriptor 2 that was closed is
    soon reused (by a pipe to a worker, a file), so a host that lost it never hands it on.
    """
    if sys.__stderr__ is None or not _STDERR_AT_IMPORT or not _stderr_open():
        import subprocess

        return subprocess.DEVNULL
    return None


def creation_flags(platform: str | None = None, has_console: bool | None = None) -> int:
    """Process creation flags for a worker: ``CREATE_NO_WINDOW`` on Windows without a console, else 0."""
    if (platform or sys.platform) != "win32":
        return 0
    if has_console is None:
        has_console = _has_console()
    return 0 if has_console else CREATE_NO_WINDOW


def _has_console() -> bool:
    """Whether this (Windows) process is attached to a console."""
    try:
        import ctypes

        return bool(ctypes.windll.kernel32.GetConsoleWindow())  # type: ignore[attr-defined]
    except (AttributeError, OSError):
        return True  # unknown: leave the flags as they were


def worker_command(module: str, *, frozen: bool | None = None, executable: str | None = None) -> list[str]:
    """The command line that runs ``module`` as a worker."""
    exe = executable or sys.executable
    if frozen if frozen is not None else getattr(sys, "frozen", False):
        return [exe, WORKER_FLAG, module]
    return [exe, "-m", module]


def popen_worker(module: str, **kwargs: Any) -> subprocess.Popen[bytes]:
    """Start ``module`` as a worker, with pipes on its stdin and stdout (``kwargs`` go to Popen)."""
    import subprocess

    flags = creation_flags()
    if flags:
        kwargs["creationflags"] = kwargs.get("creationflags", 0) | flags
    return subprocess.Popen(  # noqa: S603 - this package's own module
        worker_command(module),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=worker_stderr(),
        **kwargs,
    )


def worker_streams() -> tuple[BinaryIO, BinaryIO]:
    """In a worker: its frame streams (stdin, stdout); then anything else printed to stdout goes to stderr.

    Read from the descriptors, not ``sys.stdin``/``sys.stdout`` (None in a windowed frozen app); a
    worker without a valid stderr gets the null device as one, so that native code printing to
    stdout or stderr never reaches the frames.
    """
    out = os.fdopen(os.dup(1), "wb", buffering=0)
    inp = os.fdopen(os.dup(0), "rb")
    if not _stderr_open():
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 2)
        os.close(null)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return inp, out


def freeze_support() -> None:
    """In a process started as a worker (``<app> --ryzenai-worker <module>``), run it and exit.

    Does nothing otherwise. A frozen app calls this first thing in its entry point, before it
    prints anything (the worker's stdout carries its frames) or opens a window::

        if __name__ == "__main__":
            ryzenai_core.freeze_support()
            main()

    The worker module runs by name, as ``python -m`` runs it (this module imports no worker).
    """
    argv = sys.argv
    if len(argv) < 3 or argv[1] != WORKER_FLAG:
        return
    module = argv[2]
    if module not in WORKER_MODULES:
        raise SystemExit(f"{WORKER_FLAG} {module!r}: not a worker; expected one of {', '.join(WORKER_MODULES)}")
    import runpy

    runpy.run_module(module, run_name="__main__", alter_sys=True)
    raise SystemExit(0)
