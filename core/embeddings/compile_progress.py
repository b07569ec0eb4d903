"""A slow session creation, never silent: the NPU's first compile of a shape, shown while it runs.

Creating an onnxruntime session on the VitisAI execution provider compiles the graph for the NPU
the first time a static shape is seen: minutes per shape (a published Ryzen AI 1.8 study measured
358-1,789 s for one encoder shape; a cached one loads in 2-3 s). :func:`with_compile_progress`
runs the creation it is given and, while it runs, shows

- on a terminal: a spinner with the model, the shape and the elapsed time (rich), and a line
  that says the compile happens once per shape;
- elsewhere (a service, a notebook's log, CI): a log line when it starts and one when it ends.

:func:`cache_state` says, from the cache folder, whether a shape looks compiled, so that a load
from the cache is not announced as a compile.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Literal, TypeVar

from .pass_summary import FINAL_SUMMARY

if TYPE_CHECKING:
    from rich.console import Console

__all__ = ["CacheState", "cache_state", "compile_message", "with_compile_progress"]

log = logging.getLogger("ryzenai_core")

T = TypeVar("T")
CacheState = Literal["absent", "partial", "compiled"]


def cache_state(cache_dir: str | Path, cache_key: str) -> CacheState:
    """What the VitisAI cache holds for a key: nothing, files without a final pass summary, or a finished compile.

    ``partial`` is an interrupted compile, or a runtime that does not write the summary: the
    next session may compile again.
    """
    folder = Path(cache_dir) / cache_key
    if (folder / FINAL_SUMMARY).is_file():
        return "compiled"
    try:
        return "partial" if folder.is_dir() and any(folder.iterdir()) else "absent"
    except OSError:
        return "absent"


def compile_message(name: str, shape: tuple[int, int] | None, state: CacheState) -> str:
    """What a user is told when a session of ``shape`` opens with the cache in ``state``."""
    at = f"shape {shape[0]}x{shape[1]}" if shape else "its shape"
    if state == "compiled":
        return f"loading {name} ({at}) for the NPU from the compile cache"
    why = "an earlier compile may not have finished" if state == "partial" else "first use of this shape"
    sep = "; " if state == "partial" else ", "
    return (
        f"compiling {name} for the NPU ({at}{sep}{why}): this can take minutes, once per shape: "
        "later runs load it from the cache in seconds"
    )


def with_compile_progress(
    create: Callable[[], T],
    *,
    name: str,
    shape: tuple[int, int] | None,
    state: CacheState,
    console: Console | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> T:
    """Run ``create`` (a session's creation), showing progress while it runs; its result.

    Args:
        create: what creates the session (in this thread: the compile blocks it anyway).
        name: the model's name, as messages show it.
        shape: the static ``(rows, sequence)`` shape being compiled.
        state: :func:`cache_state` of the shape's cache key before the creation.
        console: where a terminal shows the spinner (default: rich's on stderr). Without a
            terminal the start and the end are logged instead (the start as a warning when a
            compile is expected, so that a default logging setup prints it).
        clock: the clock the elapsed time is taken from.

    Raises:
        whatever ``create`` raises; the progress display is gone by then.
    """
    from rich.console import Console
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    message = compile_message(name, shape, state)
    out = console if console is not None else Console(stderr=True)
    start = clock()
    if not out.is_terminal:
        (log.info if state == "compiled" else log.warning)("%s", message)
        result = create()
        log.info("%s ready for the NPU (%s) after %.1f s", name, _shape(shape), clock() - start)
        return result
    columns = (SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn())
    with Progress(*columns, console=out, transient=True) as progress:
        progress.add_task(message, total=None)
        result = create()
    elapsed = clock() - start
    if state != "compiled":
        out.print(f"{name} compiled for the NPU ({_shape(shape)}) in {elapsed:.0f} s; cached for later runs")
    return result


def _shape(shape: tuple[int, int] | None) -> str:
    return f"{shape[0]}x{shape[1]}" if shape else "dynamic"
