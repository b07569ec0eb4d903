"""A worker started ahead (at the LLM class's import, or when a model object is built); the first call runs in it.

See ryzenai_core.engine.spare.
"""

from __future__ import annotations

import importlib
import json
import multiprocessing
import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import TINY_LLAMA
from langchain_ryzenai import ChatRyzenAI
from llamaindex_ryzenai import RyzenAILLM
from ryzenai_core.engine import spare
from ryzenai_core.engine.engine import Engine


@pytest.fixture(autouse=True)
def _none_waiting():
    spare.stop_spare()
    yield
    spare.stop_spare()


def _first_call(llm: ChatRyzenAI | RyzenAILLM) -> None:
    if isinstance(llm, ChatRyzenAI):
        llm.invoke("hi")
    else:
        llm.complete("hi")


def _gone(pid: int) -> bool:
    """Whether process ``pid`` has exited (a zombie not yet reaped counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            return f.read().split(")")[-1].split()[0] == "Z"
    except FileNotFoundError:
        return True


FACES = {
    "langchain": lambda model, **kw: ChatRyzenAI(model=model, max_tokens=2, temperature=0, **kw),
    "llamaindex": lambda model, **kw: RyzenAILLM(model=model, max_new_tokens=2, temperature=0, **kw),
}


@pytest.mark.parametrize("face", FACES)
def test_the_first_call_runs_in_the_worker_its_model_object_started(face, copy_package):
    folder = str(copy_package(TINY_LLAMA))  # a model no engine of this test run has opened
    engines = Engine.registry.engines()
    llm = FACES[face](folder)
    pid = spare.waiting_pid()
    assert pid is not None
    assert Engine.registry.engines() == engines  # nothing opened: only an interpreter started
    for _ in range(5):
        FACES[face](folder)
    assert spare.waiting_pid() == pid  # one at a time
    _first_call(llm)
    assert llm.worker_pid() == pid
    assert spare.waiting_pid() is None
    Engine.get(folder).close()


@pytest.mark.parametrize("face", FACES)
def test_a_model_that_runs_inline_starts_no_worker(face, monkeypatch):
    FACES[face](str(TINY_LLAMA), execution="inline")
    assert spare.waiting_pid() is None
    monkeypatch.setenv("RYZENAI_LLM_EXECUTION", "inline")
    FACES[face](str(TINY_LLAMA))
    assert spare.waiting_pid() is None


def test_a_worker_started_before_the_environment_changed_is_stopped_not_used(copy_package, monkeypatch):
    """A variable the runtime reads, set after the model object was built, reaches the worker that runs the call."""
    folder = str(copy_package(TINY_LLAMA))
    llm = FACES["langchain"](folder)
    pid = spare.waiting_pid()
    assert pid is not None
    monkeypatch.setenv("RYZENAI_SPARE_TEST", "set after the model object was built")
    llm.invoke("hi")
    assert llm.worker_pid() not in (None, pid)
    assert _gone(pid)
    Engine.get(folder).close()


def test_a_worker_that_died_while_waiting_is_replaced(copy_package):
    folder = str(copy_package(TINY_LLAMA))
    llm = FACES["langchain"](folder)
    pid = spare.waiting_pid()
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while spare.waiting_pid() is not None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert spare.waiting_pid() is None  # a dead one is not "waiting"
    assert llm.invoke("hi").response_metadata["finish_reason"] == "length"
    assert llm.worker_pid() not in (None, pid)
    Engine.get(folder).close()


def test_a_waiting_worker_nobody_took_is_stopped():
    FACES["llamaindex"](str(TINY_LLAMA))
    pid = spare.waiting_pid()
    assert pid is not None
    spare.stop_spare()  # what runs at exit
    assert spare.waiting_pid() is None and _gone(pid)


def test_a_worker_that_cannot_be_started_ahead_leaves_the_model_object_usable(copy_package, monkeypatch):
    """Building a model object never fails for the worker started ahead: the first call starts its own."""
    folder = str(copy_package(TINY_LLAMA))

    def no_process(*args: object, **kwargs: object) -> None:
        raise OSError(24, "Too many open files")

    with monkeypatch.context() as patched:
        patched.setattr(spare, "popen_worker", no_process)
        llm = FACES["langchain"](folder)
    assert spare.waiting_pid() is None
    assert llm.invoke("hi").response_metadata["finish_reason"] == "length"
    Engine.get(folder).close()


def test_a_worker_started_in_another_working_folder_is_stopped_not_used(copy_package, monkeypatch, tmp_path):
    """A relative path (a chat_template file) leads where the caller is when it calls."""
    folder = str(copy_package(TINY_LLAMA))
    llm = FACES["langchain"](folder)
    pid = spare.waiting_pid()
    assert pid is not None
    monkeypatch.chdir(tmp_path)
    llm.invoke("hi")
    assert llm.worker_pid() not in (None, pid)
    assert _gone(pid)
    Engine.get(folder).close()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="POSIX fork")
def test_a_forked_child_keeps_no_end_of_the_parents_worker(copy_package):
    """A child forked after the model object was built closes its copy of the worker's pipes: closing
    the engine in the parent still ends the worker at once (it sees its input end), the child alive."""
    folder = str(copy_package(TINY_LLAMA))
    llm = FACES["langchain"](folder)
    pid = spare.waiting_pid()
    assert pid is not None
    said, tell = os.pipe()
    child = os.fork()
    if child == 0:  # the child: nothing of pytest runs here
        os.write(tell, b"none waits" if spare.waiting_pid() is None else b"one waits")
        time.sleep(20)
        os._exit(0)
    os.close(tell)
    try:
        assert os.read(said, 64) == b"none waits"  # the parent's worker is not the child's
        llm.invoke("hi")
        assert llm.worker_pid() == pid
        started = time.monotonic()
        Engine.get(folder).close()
        assert time.monotonic() - started < 4  # not the 5 s wait and kill of a worker whose input never ends
        assert _gone(pid)
    finally:
        os.close(said)
        os.kill(child, signal.SIGKILL)
        os.waitpid(child, 0)


#: A new process: the face's LLM class imported (as `from package import name` does), the LLM
#: built and called once; prints the waiting worker's pid after each step, whether the framework
#: was imported when the worker started, and the pid of the worker that ran the call.
IMPORTS_THEN_CALL = """
import importlib, json, sys
from ryzenai_core.engine import spare
face, model = sys.argv[1], sys.argv[2]
seen = {"first": spare.waiting_pid()}
framework = "langchain_core.language_models" if face == "langchain" else "llama_index.core"
start = spare.start_spare


def start_and_say_when(**how):
    seen.setdefault("started with the framework imported", framework in sys.modules)
    start(**how)


spare.start_spare = start_and_say_when
module, name, limit, call = {
    "langchain": ("langchain_ryzenai", "ChatRyzenAI", "max_tokens", "invoke"),
    "llamaindex": ("llama_index.llms.ryzenai", "RyzenAILLM", "max_new_tokens", "complete"),
}[face]
LLM = getattr(importlib.import_module(module), name)
seen["llm"] = spare.waiting_pid()
llm = LLM(model=model, temperature=0, **{limit: 2})
seen["built"] = spare.waiting_pid()
getattr(llm, call)("hi")
seen["called"] = llm.worker_pid()
print(json.dumps(seen))
"""


def _imports_then_call(face: str, model: str) -> dict[str, int | None]:
    environ = {k: v for k, v in os.environ.items() if k != "RYZENAI_LLM_EXECUTION"}
    done = subprocess.run(
        [sys.executable, "-c", IMPORTS_THEN_CALL, face, model],
        env=environ, capture_output=True, text=True, timeout=120, check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


@pytest.mark.parametrize("face", FACES)
def test_the_llm_class_import_starts_the_worker_its_first_call_runs_in(face):
    """The worker starts before the framework's import, so it runs beside it."""
    seen = _imports_then_call(face, str(TINY_LLAMA))
    assert seen["first"] is None and seen["llm"] is not None
    assert seen["started with the framework imported"] is False
    assert seen["built"] == seen["llm"]  # building the model object starts no second one
    assert seen["called"] == seen["llm"]


#: Each face package's LLM class and its other classes.
CLASSES = {
    "langchain": ("langchain_ryzenai", "ChatRyzenAI", ("RyzenAIEmbeddings", "RyzenAIRerank")),
    "llamaindex": ("llamaindex_ryzenai", "RyzenAILLM", ("BucketPackingPostprocessor", "RyzenAIEmbedding", "RyzenAIRerank")),
}


def _read_again(monkeypatch: pytest.MonkeyPatch, package: object, name: str) -> None:
    """Read a face package's class as its first import does (the name not loaded yet)."""
    monkeypatch.delitem(vars(package), name, raising=False)
    getattr(package, name)


@pytest.mark.parametrize("face", FACES)
def test_the_embedding_and_rerank_classes_start_no_llm_worker(face, monkeypatch):
    module, llm, others = CLASSES[face]
    package = importlib.import_module(module)
    monkeypatch.delenv("RYZENAI_LLM_EXECUTION", raising=False)
    for name in others:
        _read_again(monkeypatch, package, name)
    assert spare.waiting_pid() is None
    _read_again(monkeypatch, package, llm)
    assert spare.waiting_pid() is not None


@pytest.mark.parametrize("face", FACES)
def test_the_llm_class_import_starts_no_worker_when_llms_run_inline(face, monkeypatch):
    module, llm, _ = CLASSES[face]
    monkeypatch.setenv("RYZENAI_LLM_EXECUTION", "inline")
    _read_again(monkeypatch, importlib.import_module(module), llm)
    assert spare.waiting_pid() is None


@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="reads a process's mapped files from /proc")
def test_a_waiting_worker_has_imported_what_every_first_call_needs():
    """numpy (onnxruntime-genai's token ids) is loaded while the worker waits, not on the first call's path."""
    FACES["langchain"](str(TINY_LLAMA))
    pid = spare.waiting_pid()
    assert pid is not None
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with open(f"/proc/{pid}/maps", encoding="utf-8", errors="replace") as f:
            if "_multiarray_umath" in f.read():
                break
        time.sleep(0.05)
    else:
        pytest.fail("the waiting worker never imported numpy")
    assert spare.waiting_pid() == pid  # still waiting: nothing was opened


def test_the_warm_up_never_fails_the_worker(monkeypatch):
    """What the warm-up cannot import is the first call's to report, with its own error."""
    from ryzenai_core.engine import worker

    monkeypatch.setitem(sys.modules, "numpy", None)  # an import of numpy now fails
    worker.warm_up()


def test_a_worker_is_not_started_ahead_without_a_working_folder(monkeypatch):
    """A deleted working folder makes no import or model object fail: the first call starts its own."""

    def deleted() -> str:
        raise FileNotFoundError(2, "No such file or directory")

    monkeypatch.setattr(os, "getcwd", deleted)
    spare.start_spare_ahead()
    spare.start_spare()
    assert spare.waiting_pid() is None


def test_an_inline_model_stops_the_worker_its_class_import_started():
    spare.start_spare_ahead()  # what the import of ChatRyzenAI / RyzenAILLM does
    pid = spare.waiting_pid()
    assert pid is not None
    FACES["llamaindex"](str(TINY_LLAMA), execution="inline")
    assert spare.waiting_pid() is None and _gone(pid)


def test_an_inline_model_keeps_the_worker_a_process_model_counts_on():
    spare.start_spare_ahead()
    pid = spare.waiting_pid()
    FACES["langchain"](str(TINY_LLAMA))  # runs in a worker: this one
    FACES["llamaindex"](str(TINY_LLAMA), execution="inline")
    assert spare.waiting_pid() == pid


#: The main module of a program whose pool of spawned processes imports it again.
SPAWNING_MAIN = """
import multiprocessing, sys
from langchain_ryzenai import ChatRyzenAI
from ryzenai_core.engine import spare


def waiting_in_child():
    return spare.waiting_pid()


if __name__ == "__main__":
    with multiprocessing.get_context(sys.argv[1]).Pool(1) as pool:
        child = pool.apply(waiting_in_child)
    print("parent", spare.waiting_pid() is not None, "child", child)
"""


@pytest.mark.parametrize("method", [m for m in ("spawn", "forkserver") if m in multiprocessing.get_all_start_methods()])
def test_a_spawned_child_that_imports_the_main_module_starts_no_worker(tmp_path, method):
    """A pool's processes import the parent's main module again, LLM class included: they start none."""
    main = tmp_path / "main.py"
    main.write_text(SPAWNING_MAIN, encoding="utf-8")
    environ = {k: v for k, v in os.environ.items() if k != "RYZENAI_LLM_EXECUTION"}
    done = subprocess.run(
        [sys.executable, str(main), method], env=environ, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["parent", "True", "child", "None"]
