"""A first NPU compile is shown while it runs (ryzenai_core.embeddings.compile_progress), with a stand-in session creation."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from rich.console import Console

from ryzenai_core.embeddings.compile_progress import cache_state, compile_message, with_compile_progress
from ryzenai_core.embeddings.pass_summary import FINAL_SUMMARY


def fake_clock(*readings: float) -> Iterator[float]:
    return iter(readings)


def terminal() -> tuple[Console, io.StringIO]:
    buffer = io.StringIO()
    return Console(file=buffer, force_terminal=True, width=200, color_system=None), buffer


def test_a_terminal_shows_a_spinner_with_the_shape_and_elapsed_time_while_the_session_is_created() -> None:
    console, buffer = terminal()
    seen: list[str] = []

    def create() -> str:  # the stand-in for a compiling session: it looks at the screen while it "compiles"
        seen.append(buffer.getvalue())
        return "session"

    clock = fake_clock(100.0, 412.0)
    got = with_compile_progress(
        create, name="bge-small", shape=(1, 128), state="absent", console=console, clock=lambda: next(clock)
    )
    assert got == "session"
    during = seen[0]
    assert "compiling bge-small for the NPU (shape 1x128, first use of this shape)" in during
    assert "once per shape: later runs load it from the cache in seconds" in during
    assert "0:00:00" in during  # the elapsed-time column
    assert buffer.getvalue().rstrip().endswith("bge-small compiled for the NPU (1x128) in 312 s; cached for later runs")


def test_without_a_terminal_the_start_is_a_warning_and_the_end_a_log_line(caplog: pytest.LogCaptureFixture) -> None:
    console = Console(file=io.StringIO(), width=200)
    logged: list[str] = []

    def create() -> int:
        logged.extend(r.getMessage() for r in caplog.records)
        return 7

    clock = fake_clock(0.0, 95.5)
    with caplog.at_level(logging.INFO, logger="ryzenai_core"):
        got = with_compile_progress(
            create, name="m", shape=(8, 512), state="absent", console=console, clock=lambda: next(clock)
        )
    assert got == 7
    assert logged == [compile_message("m", (8, 512), "absent")]  # said before the creation, not after
    start, end = caplog.records
    assert start.levelno == logging.WARNING and "once per shape" in start.getMessage()
    assert end.levelno == logging.INFO and end.getMessage() == "m ready for the NPU (8x512) after 95.5 s"
    assert console.file.getvalue() == ""  # type: ignore[attr-defined]


def test_a_cached_shape_is_a_load_not_a_compile(caplog: pytest.LogCaptureFixture) -> None:
    console, buffer = terminal()
    with_compile_progress(lambda: None, name="m", shape=(1, 64), state="compiled", console=console)
    assert "loading m (shape 1x64) for the NPU from the compile cache" in buffer.getvalue()
    assert "compiled for the NPU" not in buffer.getvalue()
    with caplog.at_level(logging.INFO, logger="ryzenai_core"):
        with_compile_progress(
            lambda: None, name="m", shape=(1, 64), state="compiled", console=Console(file=io.StringIO())
        )
    assert [r.levelno for r in caplog.records] == [logging.INFO, logging.INFO]  # no warning for a load


def test_an_interrupted_compile_is_said_to_be_compiling_again() -> None:
    assert "an earlier compile may not have finished" in compile_message("m", (1, 32), "partial")
    assert "shape 1x32" in compile_message("m", (1, 32), "partial")


def test_a_failing_creation_raises_through_and_claims_no_compile() -> None:
    console, buffer = terminal()

    def create() -> None:
        raise RuntimeError("access violation")

    with pytest.raises(RuntimeError, match="access violation"):
        with_compile_progress(create, name="m", shape=(1, 128), state="absent", console=console)
    assert "cached for later runs" not in buffer.getvalue()


def test_cache_state_reads_the_cache_folder(tmp_path: Path) -> None:
    assert cache_state(tmp_path, "k") == "absent"
    (tmp_path / "k").mkdir()
    assert cache_state(tmp_path, "k") == "absent"  # an empty folder holds no compile
    (tmp_path / "k" / "vaiml_par_0").mkdir()
    assert cache_state(tmp_path, "k") == "partial"
    (tmp_path / "k" / FINAL_SUMMARY).write_text("Number of operators in the model: 1\n")
    assert cache_state(tmp_path, "k") == "compiled"
