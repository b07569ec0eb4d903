"""Workers start from any host: one without standard streams (pythonw, a GUI host, a service), a
frozen app, Windows without a console; and a replaced worker has exited before the next starts."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from conftest import FIXTURES, TINY_LLAMA
from ryzenai_core import spawn as _spawn
from ryzenai_core.engine.engine import Engine
from ryzenai_core.generation.loader import SessionKey
from ryzenai_core.messages import ChatMessage
from ryzenai_core.options import GenerationOptions
from ryzenai_core.package.folder import ModelPackage

TINY_ST = FIXTURES / "embeddings" / "tiny-bert-st"

# One generation and one embedding, each in its worker process, written to the file argv[1].
CALLS = f"""
import json, sys
result = {{}}
try:
    from ryzenai_core import ChatMessage, Engine, GenerationOptions
    from ryzenai_core.embeddings.embedding import EmbeddingEngine
    engine = Engine.get({str(TINY_LLAMA)!r}, execution="process")
    answer = engine.generate([ChatMessage("user", "hi")], GenerationOptions(max_new_tokens=3, temperature=0))
    result["tokens"] = answer.usage.completion_tokens
    result["llm_pid"] = engine.worker_pid()
    embedder = EmbeddingEngine({str(TINY_ST)!r}, execution="process")
    result["dims"] = len(embedder.embed(["hello"]).vectors[0])
    result["embed_pids"] = embedder.worker_pids()
except BaseException:
    import traceback
    result["error"] = traceback.format_exc()
with open(sys.argv[1], "w") as f:
    json.dump(result, f)
"""


def _run_host(tmp_path: Path, prologue: str, **popen: object) -> dict[str, object]:
    script = tmp_path / "host.py"
    script.write_text(textwrap.dedent(prologue) + NOISY_WORKERS + CALLS)
    out = tmp_path / "result.json"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONVERBOSE"}
    proc = subprocess.run([sys.executable, str(script), str(out)], timeout=120, env=env, **popen)  # type: ignore[call-overload]
    assert proc.returncode == 0, proc
    result: dict[str, object] = json.loads(out.read_text())
    assert "error" not in result, result["error"]
    return result


# The workers write to their stderr from their first line (Python's import trace), as native code
# printing a warning does; the host turns it on for its children only (its own stderr is gone).
NOISY_WORKERS = """
import os
os.environ["PYTHONVERBOSE"] = "1"
"""


@pytest.mark.slow
def test_a_host_whose_standard_descriptors_are_closed_starts_its_workers(tmp_path):
    """As a pythonw or GUI host: descriptors 0-2 closed and sys.std* None before the package loads.
    The host's next pipes take descriptors 0-2; a worker inheriting that "stderr" wrote into its
    own frame pipe."""
    result = _run_host(
        tmp_path,
        """
        import os, sys
        for fd in (0, 1, 2):
            os.close(fd)
        sys.stdin = sys.stdout = sys.stderr = sys.__stdin__ = sys.__stdout__ = sys.__stderr__ = None
        """,
    )
    assert result["tokens"] == 3 and result["dims"] == 32
    assert isinstance(result["llm_pid"], int) and len(result["embed_pids"]) == 1  # type: ignore[arg-type]


@pytest.mark.slow
def test_a_host_started_on_the_null_device_with_no_sys_streams_starts_its_workers(tmp_path):
    result = _run_host(
        tmp_path,
        """
        import sys
        sys.stdin = sys.stdout = sys.stderr = sys.__stdin__ = sys.__stdout__ = sys.__stderr__ = None
        """,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    assert result["tokens"] == 3 and result["dims"] == 32


@pytest.mark.slow
@pytest.mark.skipif(sys.platform == "win32", reason="the stand-in app is a POSIX shell launcher")
def test_a_frozen_app_runs_its_workers_through_freeze_support(tmp_path):
    """A frozen app's executable is the app: it starts workers as ``<app> --ryzenai-worker <module>``
    and its entry point's freeze_support() runs them. The app here is a launcher script."""
    app = tmp_path / "app.py"
    app.write_text(
        textwrap.dedent(
            """
            import sys
            sys.frozen = True
            import ryzenai_core
            ryzenai_core.freeze_support()
            if len(sys.argv) != 2:  # an app that does not know what it was started with
                sys.exit(f"app started with {sys.argv[1:]}")
            sys.executable = sys.argv[0].replace("app.py", "app")
            """
        )
        + CALLS
    )
    launcher = tmp_path / "app"
    launcher.write_text(f'#!/bin/sh\nexec {sys.executable} {app} "$@"\n')
    launcher.chmod(0o755)
    out = tmp_path / "result.json"
    proc = subprocess.run([str(launcher), str(out)], timeout=120, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(out.read_text())
    assert "error" not in result, result["error"]
    assert result["tokens"] == 3 and result["dims"] == 32


def test_worker_command_for_an_interpreter_and_a_frozen_app():
    assert _spawn.worker_command("ryzenai_core.engine.worker", frozen=False, executable="py") == [
        "py",
        "-m",
        "ryzenai_core.engine.worker",
    ]
    assert _spawn.worker_command("ryzenai_core.embeddings.worker", frozen=True, executable="App.exe") == [
        "App.exe",
        "--ryzenai-worker",
        "ryzenai_core.embeddings.worker",
    ]


def test_freeze_support_does_nothing_in_a_process_not_started_as_a_worker(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["app", "--ryzenai-worker-not", "x"])
    _spawn.freeze_support()
    monkeypatch.setattr(sys, "argv", ["app", "--ryzenai-worker", "os"])
    with pytest.raises(SystemExit, match="'os': not a worker"):
        _spawn.freeze_support()


@pytest.mark.parametrize(
    ("platform", "console", "flags"),
    [("win32", False, 0x08000000), ("win32", True, 0), ("linux", False, 0), ("darwin", False, 0)],
)
def test_no_console_window_per_worker_under_a_windows_host_without_one(platform, console, flags):
    assert _spawn.creation_flags(platform, has_console=console) == flags
    if sys.platform == "win32":
        assert subprocess.CREATE_NO_WINDOW == _spawn.CREATE_NO_WINDOW


def test_worker_stderr_is_the_caller_s_only_while_it_has_one(monkeypatch):
    assert _spawn.worker_stderr() is None  # pytest's stderr
    monkeypatch.setattr(sys, "__stderr__", None)
    assert _spawn.worker_stderr() == subprocess.DEVNULL
    monkeypatch.undo()
    monkeypatch.setattr(_spawn, "_STDERR_AT_IMPORT", False)
    assert _spawn.worker_stderr() == subprocess.DEVNULL


@pytest.mark.slow
def test_a_closed_engine_s_worker_has_exited_before_a_call_starts_the_next(monkeypatch):
    """close() and a call from another thread: the call waits until the old worker is reaped, so two
    workers of one model (two NPU contexts) never run at once."""
    engine = Engine(Engine.get(TINY_LLAMA).key, "process")
    try:
        engine.load()
        old = engine.worker_pid()
        assert old is not None
        backend = engine.backend
        closing = threading.Event()
        reaped: list[bool] = []
        real_close = backend.close

        def slow_close() -> None:  # a worker that takes its time to exit (a prefill holding the GIL)
            closing.set()
            threading.Event().wait(0.5)
            real_close()
            reaped.append(True)

        monkeypatch.setattr(backend, "close", slow_close)
        closer = threading.Thread(target=engine.close)
        closer.start()
        closing.wait(5)
        started_after: list[bool] = []
        engine.generate([ChatMessage("user", "hi")], GenerationOptions(max_new_tokens=2))
        started_after.append(bool(reaped))
        closer.join(5)
        assert started_after == [True]
        assert engine.worker_pid() not in (None, old)
    finally:
        engine.close()


def test_a_worker_serves_the_package_its_caller_read_unless_the_folder_changed_since(copy_package):
    """The caller's reading crosses to the worker in its first frame; a folder changed since is read again there."""
    folder = copy_package(TINY_LLAMA)
    os.utime(folder, ns=(0, 0))  # an old folder: the change below shows in its time
    read = ModelPackage.open(folder)
    told = dataclasses.replace(read, chat_template_source="told {{ messages[0]['content'] }}")
    hi = [ChatMessage("user", "hi")]
    engine = Engine(SessionKey(str(read.path), num_threads=1), "process", told)
    try:
        assert engine.render(hi) == "told hi"  # the worker did not read the folder: it has the caller's reading
        engine.close()
        (folder / "extra.txt").write_text("a file added since the caller read the folder")
        assert engine.render(hi).startswith("<|begin_of_text|>")  # the next worker read the folder again
    finally:
        engine.close()
