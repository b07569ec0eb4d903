from __future__ import annotations

import asyncio
import importlib.metadata as md
import json
import os
import shutil
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests"
FIXTURES = TESTS / "fixtures"
MODELS = FIXTURES / "models"
REPLICAS = FIXTURES / "replicas"
TINY_LLAMA = MODELS / "tiny-llama"
TINY_QWEN3 = MODELS / "tiny-qwen3"
TINY_GEMMA3 = MODELS / "tiny-gemma3-text"

# An answer that outlasts every timeout and unread-stream grace in the tests on a machine of any
# speed: 16,000 tokens of the Gemma 3 text fixture (window 16,384) take about 7 s on a 2-core CI
# machine. tiny-llama's longest answer (3,500 tokens) ends in 0.65 s there, close enough to a
# 0.3 s timeout that a quicker machine finishes it first.
LASTING_MODEL = TINY_GEMMA3
LASTING_TOKENS = 16000

# About 3770 tokens of tiny-qwen3 (window 4096): a prefill of roughly 0.2 s on a laptop CPU, long
# enough that a runtime holding the GIL in this process visibly stalls an event loop.
LONG_PROMPT = " ".join(f"word{i % 97} alpha" for i in range(480))


async def longest_loop_gap(call: AsyncIterator[Any] | Awaitable[Any]) -> tuple[float, list[Any]]:
    """Run ``call`` (an async stream, drained, or an awaitable) beside a 2 ms ticker.

    Returns the longest time between two ticks of the event loop during the call, and what the
    call produced (the stream's items, or ``[result]``).
    """
    gaps: list[float] = []
    done = asyncio.Event()

    async def ticker() -> None:
        last = time.perf_counter()
        while not done.is_set():
            await asyncio.sleep(0.002)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    task = asyncio.create_task(ticker())
    await asyncio.sleep(0)  # the ticker is running before the call starts
    try:
        if isinstance(call, AsyncIterator):
            out = [item async for item in call]
        else:
            out = [await call]
    finally:
        done.set()
        await task
    return max(gaps), out


@pytest.fixture(autouse=True)
def _unit_tests_load_no_model(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """tests/unit holds the tests that need no model: there, loading one or starting a worker fails."""
    if TESTS / "unit" not in Path(request.node.path).parents:
        return

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a unit test loads no model and starts no worker: this test belongs in tests/integration")

    import onnxruntime_genai as og

    from ryzenai_core import workers

    monkeypatch.setattr(og, "Model", refuse)
    monkeypatch.setattr(workers, "popen_worker", refuse)  # every worker, a model's or an encoder's, starts there
    try:
        import onnxruntime as ort
    except ImportError:
        return
    monkeypatch.setattr(ort, "InferenceSession", refuse)


@pytest.fixture
def fake_model(monkeypatch: pytest.MonkeyPatch) -> Any:
    """A scripted model behind every LLM engine the test opens (see tests/fake_engine.py): nothing loads.

    Its ``requests`` are what the faces sent; ``answer(...)`` and ``fail(...)`` script the next calls.
    """
    from fake_engine import FakeModel
    from ryzenai_core import Engine

    fake = FakeModel()
    monkeypatch.setattr(Engine, "registry", fake.registry)
    return fake


def chat_model_start(llm: Any, *args: Any, **kwargs: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """``llm.invoke(*args, **kwargs)``, and what LangChain told callbacks as it started: the model's LangSmith
    params (``ls_provider``, ``ls_model_name``, ...; LangChain's own ``ls_integration`` left out) and the
    invocation params (``_type``, the identifying params, the call's keywords)."""
    from langchain_core.callbacks import BaseCallbackHandler

    seen: list[tuple[dict[str, Any], dict[str, Any]]] = []

    class Started(BaseCallbackHandler):
        def on_chat_model_start(self, serialized: Any, messages: Any, *, metadata: Any = None, **kw: Any) -> None:
            ls = {k: v for k, v in (metadata or {}).items() if k.startswith("ls_") and k != "ls_integration"}
            seen.append((ls, kw["invocation_params"]))

    llm.invoke(*args, config={"callbacks": [Started()]}, **kwargs)
    return seen[-1]


@pytest.fixture(autouse=True)
def _no_release_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests see no RYZENAI_VERSION, RYZENAI_EP_PATH or RYZENAI_LLM_SPLIT_PREFILL unless they set it."""
    for name in ("RYZENAI_VERSION", "RYZENAI_EP_PATH", "RYZENAI_LLM_SPLIT_PREFILL"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(scope="session")
def stand_in_eps(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Stand-in Ryzen AI EP libraries, built once per run (see tests/ep_stand_ins.py)."""
    from ep_stand_ins import build

    return build(tmp_path_factory.mktemp("ep"))


@pytest.fixture
def copy_package(tmp_path: Path):
    """Copy a fixture folder into tmp_path (optionally under another name) for mutation."""

    def _copy(src: Path, name: str | None = None) -> Path:
        dst = tmp_path / (name or src.name)
        shutil.copytree(src, dst)
        return dst

    return _copy


@pytest.fixture
def llamaindex_event_loop():
    """A main-thread event loop, closed after the test.

    Sync LlamaIndex code (token estimates, memory, streaming query engines) runs coroutines
    through ``llama_index.core.async_utils.asyncio_run``, which otherwise creates a loop it
    never closes (a ResourceWarning once ``asyncio.run`` replaces it).
    """
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    yield loop
    asyncio.set_event_loop(None)
    loop.close()


@pytest.fixture
def llamaindex_events():
    """Every LlamaIndex instrumentation event of the test, in order (a handler on the root dispatcher)."""
    from llama_index.core.instrumentation import get_dispatcher
    from llama_index.core.instrumentation.event_handlers import BaseEventHandler

    class Collect(BaseEventHandler):
        events: list[Any] = []

        def handle(self, event: Any, **kwargs: Any) -> None:
            self.events.append(event)

    handler = Collect(events=[])
    dispatcher = get_dispatcher()
    dispatcher.add_event_handler(handler)
    yield handler.events
    dispatcher.event_handlers.remove(handler)


def process_alive(pid: int) -> bool:
    """Whether a process with this id is still there (not yet exited and reaped)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def tear_first_deltas(monkeypatch: pytest.MonkeyPatch, times: int = 1) -> list[Any]:
    """The caller reads the first delta frame of the next ``times`` attempts as torn (the worker is
    then killed; a call with no output yet is sent again). Returns the list the torn frames go to
    (clear it to tear more)."""
    import pickle

    from ryzenai_core import workers as workers_module
    from ryzenai_core.ipc import Delta

    real = workers_module.parse_frame
    torn: list[Any] = []

    def tearing(data: Any) -> Any:
        message = real(data)
        if isinstance(message, Delta) and len(torn) < times:
            torn.append(message)
            raise pickle.UnpicklingError("pickle data was truncated")
        return message

    monkeypatch.setattr(workers_module, "parse_frame", tearing)
    return torn


def with_logit_bias(src: Path, dst: Path, bias: dict[int, float]) -> Path:
    """A copy of the fixture model ``src`` at ``dst`` whose logits get ``bias`` added (token id -> value).

    The fixtures' decoders end in ``logits += logits_suppress_bias`` (scripts/build_fixtures.py): the
    copy adds to that vector, so a test can make a model prefer a token it would rarely pick.
    """
    import numpy as np
    import onnx
    from onnx import numpy_helper

    shutil.copytree(src, dst)
    model = onnx.load(str(dst / "model.onnx"), load_external_data=False)
    init = next(t for t in model.graph.initializer if t.name == "logits_suppress_bias")
    values = numpy_helper.to_array(init).copy()
    for token, value in bias.items():
        values[token] += np.float32(value)
    init.CopyFrom(numpy_helper.from_array(values, init.name))
    onnx.save(model, str(dst / "model.onnx"))
    return dst


@pytest.fixture(scope="session")
def marker_eager_vision(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, int]]:
    """The Gemma 3 vision fixture biased towards its image markers, and their ids.

    Unmasked, greedy decoding picks ``<image_soft_token>`` at every step (``<start_of_image>``
    next, then ``<end_of_image>``), and the step after a generated soft token fails in the runtime:
    the embedding model has no image feature row for it (as with the real Gemma 3).
    """
    vision = MODELS / "tiny-gemma3-vision"
    names = ("<image_soft_token>", "<start_of_image>", "<end_of_image>")
    added = json.loads((vision / "tokenizer.json").read_text(encoding="utf-8"))["added_tokens"]
    ids = {t["content"]: t["id"] for t in added if t["content"] in names}
    bias = {ids[name]: value for name, value in zip(names, (300.0, 200.0, 100.0), strict=True)}
    return with_logit_bias(vision, tmp_path_factory.mktemp("eager") / vision.name, bias), ids


def close_engines_under(folder: Path) -> None:
    """Close (and forget) every shared engine on a model under ``folder``."""
    from ryzenai_core import Engine

    for engine in Engine.registry.forget(lambda slot: Path(slot.key.path).is_relative_to(folder), Engine):
        engine.close()


@pytest.fixture
def installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., None]]:
    """``installed(("onnxruntime-genai-ryzenai", "0.14.0"), ...)``: the distributions runtime.py sees.

    Each one is a real ``.dist-info`` folder read by :mod:`importlib.metadata`, through the
    two functions runtime.py calls (``version`` and ``distributions``), restricted to that
    folder. ``runtime_info``'s cache is cleared before and after. Only the installed
    distributions are stood in for (see tests/integration/test_runtime_branches.py).
    """
    from ryzenai_core.package import runtime as runtime_module
    from ryzenai_core.package.runtime import runtime_info

    site = tmp_path / "site-packages"
    site.mkdir()

    def version(name: str) -> str:
        found = next(iter(md.distributions(name=name, path=[str(site)])), None)
        if found is None:
            raise md.PackageNotFoundError(name)
        return found.version

    def distributions() -> Iterator[md.Distribution]:
        return iter(md.distributions(path=[str(site)]))

    fake = SimpleNamespace(version=version, distributions=distributions, PackageNotFoundError=md.PackageNotFoundError)

    def install(*dists: tuple[str | None, str]) -> None:
        for i, (name, ver) in enumerate(dists):
            info = site / f"{(name or f'unnamed{i}').replace('-', '_')}-{ver}.dist-info"
            info.mkdir()
            lines = ["Metadata-Version: 2.1", f"Version: {ver}"]
            if name is not None:
                lines.insert(1, f"Name: {name}")
            (info / "METADATA").write_text("\n".join(lines) + "\n", encoding="utf-8")
        runtime_info.cache_clear()

    monkeypatch.setattr(runtime_module, "_metadata", lambda: fake)
    runtime_info.cache_clear()
    yield install
    runtime_info.cache_clear()
