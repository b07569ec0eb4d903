"""Encoders on the VitisAI path, on the CPU: session options, compile progress, warmup, where it ran.

onnxruntime here has no VitisAI execution provider. The tests stand it in where the engine meets
it: ``get_available_providers`` lists it (so the engine takes the NPU path), and the session
creation (:class:`StandInVitisAI`, in place of ``onnxruntime.InferenceSession`` in this process)
records the providers and options each session is created with, writes into
``<cache_dir>/<cache_key>`` what the VitisAI compiler leaves there (a pass summary, from
tests/fixtures/vitisai, or none), and opens the graph on the CPU provider. Sessions run inline
(``execution="inline"``) so the stand-in sees them; one test runs a worker and checks the spec
it opens its session with.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest

from conftest import FIXTURES, TINY_LLAMA
from ryzenai_core.embeddings import runner
from ryzenai_core.embeddings.cache import file_digest
from ryzenai_core.embeddings.embedding import EmbeddingEngine
from ryzenai_core.embeddings.engine import EncoderEngine
from ryzenai_core.embeddings.pass_summary import FINAL_SUMMARY
from ryzenai_core.embeddings.vitisai import cache_key, release_tag, shipped_config_file
from ryzenai_core.embeddings.warmup import warm_up
from ryzenai_core.errors import ConfigError, InvalidRequestError
from ryzenai_core.rerank.engine import RerankEngine

TINY_ST = FIXTURES / "embeddings" / "tiny-bert-st"
CROSS = FIXTURES / "rerank" / "tiny-bert-cross-encoder"
SUMMARIES = FIXTURES / "vitisai"
PARTIAL = SUMMARIES / "constructed-stx-partial.final-vaiml-pass-summary.txt"
ON_THE_CPU = SUMMARIES / "constructed-stx-compile-errors.final-vaiml-pass-summary.txt"
VITIS = "VitisAIExecutionProvider"
SHORT = "the vantor lab"  # 5 tokens: the CPU's
LONG = "the lab " * 20  # 42 tokens: bucket 64 (or 128)


class StandInVitisAI:
    """``onnxruntime.InferenceSession`` as the VitisAI EP behaves at creation, run on the CPU.

    A session asked for VitisAI whose cache key has no final pass summary "compiles": the
    summary given (or none: a runtime that writes none) goes to ``<cache_dir>/<cache_key>``.
    """

    def __init__(self, summary: Path | None, caplog: pytest.LogCaptureFixture | None = None) -> None:
        self.summary = summary
        self.calls: list[SimpleNamespace] = []
        self.compiled: list[str] = []
        self.caplog = caplog
        self.real = ort.InferenceSession

    def __call__(self, path: str, sess_options: Any = None, providers: Any = None, provider_options: Any = None) -> Any:
        said = [r.getMessage() for r in self.caplog.records] if self.caplog else []
        self.calls.append(
            SimpleNamespace(
                onnx_file=path, providers=list(providers), options=[dict(o) for o in provider_options], said=said
            )
        )
        if providers[0] == VITIS:
            folder = Path(provider_options[0]["cache_dir"]) / provider_options[0]["cache_key"]
            if not (folder / FINAL_SUMMARY).is_file():
                self.compiled.append(provider_options[0]["cache_key"])
                folder.mkdir(parents=True, exist_ok=True)
                (folder / "context.json").write_text("{}", encoding="utf-8")  # what a compile leaves besides
                if self.summary is not None:
                    (folder / FINAL_SUMMARY).write_text(self.summary.read_text(encoding="utf-8"), encoding="utf-8")
        return self.real(path, sess_options=sess_options, providers=["CPUExecutionProvider"])

    def vitis(self) -> list[SimpleNamespace]:
        return [c for c in self.calls if c.providers[0] == VITIS]


def place_summary(engine: Any, shape: tuple[int, int], summary: Path) -> None:
    """A pass summary where the engine looks for the compile of ``shape`` (as the VitisAI compiler leaves it)."""
    folder = engine.cache.compile_folder(shape)
    folder.mkdir(parents=True)
    (folder / FINAL_SUMMARY).write_text(summary.read_text(encoding="utf-8"), encoding="utf-8")


def _forget_shared_encoders() -> None:
    for engine in EmbeddingEngine.registry.forget(lambda key: True, EncoderEngine):
        engine.close()


@pytest.fixture
def npu(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    """onnxruntime lists the VitisAI provider; the per-user cache is a temporary folder (given).

    Shared encoder engines made before or during the test are closed: their sessions and cache
    folders are this test's.
    """
    monkeypatch.setattr(ort, "get_available_providers", lambda: [VITIS, "CPUExecutionProvider"])
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "user-cache"))
    _forget_shared_encoders()
    yield tmp_path / "user-cache" / "ryzenai-llm"
    _forget_shared_encoders()


def stand_in(monkeypatch: pytest.MonkeyPatch, summary: Path | None = PARTIAL, caplog: Any = None) -> StandInVitisAI:
    fake = StandInVitisAI(summary, caplog)
    monkeypatch.setattr(ort, "InferenceSession", fake)
    return fake


# -- the options a session is created with ---------------------------------------------------------


def test_an_npu_session_gets_amds_configuration_the_user_cache_and_a_key_per_shape(npu, monkeypatch):
    fake = stand_in(monkeypatch)
    engine = EmbeddingEngine(TINY_ST, execution="inline", buckets=[64, 128])
    result = engine.embed([LONG, LONG + LONG])
    first, second = fake.vitis()
    config = shipped_config_file()
    digest, config_digest = file_digest(engine.package.onnx_file), hashlib.sha256(config.read_bytes()).hexdigest()
    release = release_tag(ort.__version__)
    for call, shape in ((first, (1, 64)), (second, (1, 128))):
        assert call.providers == [VITIS, "CPUExecutionProvider"] and call.options[1] == {}
        assert call.options[0] == {
            "config_file": str(config),
            "cache_dir": str(npu / "vitisai"),
            "cache_key": cache_key("tiny-bert-st", digest, shape, release, config_digest),
        }
        assert call.onnx_file.endswith(f"model_{shape[0]}x{shape[1]}.onnx")  # the static copy is compiled
    assert first.options[0]["cache_key"] != second.options[0]["cache_key"]
    assert result.input_shapes == ["1x64", "1x128"]


def test_a_users_configuration_and_options_reach_the_session_and_key_its_cache(npu, monkeypatch, tmp_path):
    fake = stand_in(monkeypatch)
    own = tmp_path / "my_vaiml_config.json"
    own.write_text(json.dumps({"passes": [], "target": "VAIML"}), encoding="utf-8")
    options = {"config_file": str(own), "encryptionKey": "secret"}
    engine = RerankEngine(
        CROSS, execution="inline", provider_options=options, cache_dir=tmp_path / "cache", cpu_max_tokens=0
    )
    engine.rerank("who directs the lab?", ["the vantor lab"])
    (call,) = fake.vitis()
    got = call.options[0]
    assert (got["config_file"], got["cache_dir"], got["encryption_key"]) == (
        str(own),
        str(tmp_path / "cache" / "vitisai"),
        "secret",
    )
    shipped = RerankEngine(CROSS, execution="inline", cache_dir=tmp_path / "cache").cache.vitisai_options((1, 256))
    assert got["cache_key"] != shipped["cache_key"]  # another configuration, another compile
    own.write_text("[1, 2]", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"holds a list, not a JSON object"):
        RerankEngine(CROSS, provider_options=options, cache_dir=tmp_path / "other")  # at construction, not at a call


def test_a_worker_opens_its_session_with_the_same_options_and_the_compile_deadline(npu, monkeypatch):
    monkeypatch.setenv(runner.COMPILE_TIMEOUT_ENV, "4321")
    deadlines = []
    real = runner.WorkerBackend.first_frame_deadline

    def first_frame_deadline(self: runner.WorkerBackend) -> Any:
        deadlines.append(real(self))
        return deadlines[-1]

    monkeypatch.setattr(runner.WorkerBackend, "first_frame_deadline", first_frame_deadline)
    engine = EmbeddingEngine(TINY_ST, execution="process")
    try:
        want = engine.cache.vitisai_options((1, 128))
        engine.embed([LONG])
        (backend,) = engine.sessions.backends().values()
        assert isinstance(backend, runner.WorkerBackend) and backend.spec.provider_options == (want, {})
        assert backend.spec.providers == (VITIS, "CPUExecutionProvider")
        assert [(d.seconds, d.setting) for d in deadlines] == [
            (4321.0, "RYZENAI_LLM_COMPILE_TIMEOUT")
        ]  # not compiled yet
    finally:
        engine.close()


def test_dynamic_shapes_are_refused_on_the_npu_and_taken_to_the_cpu_on_auto(npu, caplog):
    with pytest.raises(
        InvalidRequestError, match=r"shapes='dynamic' with provider='npu'.*shapes='auto'.*provider='cpu'"
    ):
        EmbeddingEngine(TINY_ST, provider="npu", shapes="dynamic")
    with caplog.at_level(logging.WARNING, logger="ryzenai_core"):
        engine = EmbeddingEngine(TINY_ST, shapes="dynamic")
    assert engine.provider == "CPUExecutionProvider" and "the NPU compiles static shapes only" in caplog.text


# -- compiled once, never silently -------------------------------------------------------------------


def test_a_first_compile_is_announced_before_it_runs_and_a_cached_one_is_not(npu, monkeypatch, caplog):
    fake = stand_in(monkeypatch, caplog=caplog)
    with caplog.at_level(logging.INFO, logger="ryzenai_core"):
        EmbeddingEngine(TINY_ST, execution="inline").embed([LONG])
        (compile_call,) = fake.vitis()
        assert compile_call.said[-1] == (
            "compiling tiny-bert-st for the NPU (shape 1x128, first use of this shape): this can take minutes, "
            "once per shape: later runs load it from the cache in seconds"
        )  # said before the session was created, as a warning (a default logging setup prints it)
        start = next(r for r in caplog.records if r.getMessage() == compile_call.said[-1])
        assert start.levelno == logging.WARNING
        assert any(r.getMessage().startswith("tiny-bert-st ready for the NPU (1x128) after") for r in caplog.records)
        caplog.clear()
        EmbeddingEngine(TINY_ST, execution="inline").embed([LONG])  # a new engine: the cache has it
    assert len(fake.compiled) == 1 and len(fake.vitis()) == 2
    assert "loading tiny-bert-st (shape 1x128) for the NPU from the compile cache" in caplog.text
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_small_inputs_take_a_cpu_session_and_give_the_same_vectors(npu, monkeypatch):
    fake = stand_in(monkeypatch)
    engine = EmbeddingEngine(TINY_ST, execution="process")  # the CPU session runs here all the same
    place_summary(engine, (1, 128), PARTIAL)  # the worker's session is not the stand-in's: its summary, placed
    try:
        result = engine.embed([LONG, SHORT, "hello"])
        assert result.input_shapes == ["1x128", "dynamic", "dynamic"] and engine.describe()["cpu_max_tokens"] == 32
        (cpu,) = fake.calls  # the NPU shape ran in a worker; the CPU session here
        assert (cpu.providers, cpu.options, Path(cpu.onnx_file)) == (
            ["CPUExecutionProvider"],
            [{}],
            engine.package.onnx_file,
        )
        assert result.where["dynamic"]["ran_on"] == "cpu" and result.where["1x128"]["ran_on"] == "partial"
        on_cpu = EmbeddingEngine(TINY_ST, provider="cpu").embed([LONG, SHORT, "hello"]).vectors
        np.testing.assert_allclose(result.vectors, on_cpu, atol=1e-5)
    finally:
        engine.close()
    everything = EmbeddingEngine(TINY_ST, execution="inline", cpu_max_tokens=0)
    assert everything.embed([SHORT]).input_shapes == ["1x128"] and everything.describe()["cpu_max_tokens"] is None


# -- where it ran ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("summary", "ran_on", "says"),
    [
        (PARTIAL, "partial", "248 of 254 operators (97.64%) on the NPU, 6 on the CPU"),
        (ON_THE_CPU, "cpu", "VitisAI requested, ran on the CPU: 0 of 1209 operators (0.00%) on the NPU"),
        (None, "unknown", "VitisAI requested; no VitisAI pass summary in"),
    ],
    ids=["partial", "on the CPU", "no summary"],
)
def test_where_it_ran_comes_from_the_pass_summary(npu, monkeypatch, caplog, capsys, summary, ran_on, says):
    stand_in(monkeypatch, summary)
    from langchain_core.documents import Document

    from langchain_ryzenai import RyzenAIRerank
    from ryzenai_cli.main import main

    with caplog.at_level(logging.INFO, logger="ryzenai_core"):
        reranker = RyzenAIRerank(model=str(CROSS), execution="inline", cpu_max_tokens=0, top_n=2)
        docs = reranker.compress_documents(
            [Document(page_content="the vantor lab"), Document(page_content="cats")], "who?"
        )
    placed = docs[0].metadata["ryzenai_rerank"]
    assert placed["shape"] == "1x256" and placed["ran_on"] == ran_on
    assert (placed["npu_share"] is None) == (ran_on == "unknown") and docs[1].metadata["ryzenai_rerank"] == placed
    opened = next(r for r in caplog.records if r.getMessage().startswith("tiny-bert-cross-encoder (1x256): "))
    assert says in opened.getMessage() and opened.levelno == (logging.WARNING if ran_on == "cpu" else logging.INFO)
    assert main(["info", str(CROSS), "--json"]) == 0
    cache = json.loads(capsys.readouterr().out)["compile_cache"]
    assert cache["dir"] == str(npu / "vitisai") and [s["shape"] for s in cache["shapes"]] == ["1x256", "1x512"]
    compiled, absent = cache["shapes"]
    assert (compiled["state"], compiled["ran_on"], absent["state"], absent["ran_on"]) == (
        "compiled" if summary else "partial",
        ran_on,
        "absent",
        None,
    )
    assert main(["info", str(CROSS)]) == 0
    out = capsys.readouterr().out
    assert f"compile cache  {npu / 'vitisai'} (configuration {shipped_config_file()})" in out
    assert "  shape 1x512  not compiled: the first call that needs it compiles it" in out and says in out


def test_doctor_fails_an_npu_encoder_that_ran_on_the_cpu(npu, monkeypatch):
    from ryzenai_cli.doctor_model import check_model
    from ryzenai_cli.doctor_report import Report

    place_summary(EmbeddingEngine(TINY_ST), (1, 128), ON_THE_CPU)  # where doctor's own engine will look
    report = Report()
    check_model(report, str(TINY_ST), provider=None, kv_reuse=False, new_tokens=None, quick=True)
    found = {c.name: (c.status, c.detail) for c in report.checks}
    assert found["compile cache"] == (
        "ok",
        f"{npu / 'vitisai'} (configuration {shipped_config_file()}): compiled 1x128",
    )
    status, detail = found["where it ran (1x128)"]
    assert status == "fail" and detail.startswith("VitisAI requested, ran on the CPU: 0 of 1209 operators")
    assert report.measurements["where_it_ran"]["1x128"]["ran_on"] == "cpu"


# -- warmup ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("summary", [PARTIAL, None], ids=["writes a pass summary", "writes none"])
def test_warmup_compiles_each_shape_once_and_a_second_run_does_nothing(npu, monkeypatch, summary):
    fake = stand_in(monkeypatch, summary)
    steps = warm_up(EmbeddingEngine(TINY_ST, execution="inline", buckets=[48, 64]))
    assert [(s.label, s.before, s.action) for s in steps] == [
        ("1x48", "absent", "compiled"),
        ("1x64", "absent", "compiled"),
        ("1x128", "absent", "compiled"),
    ]
    assert (
        len(fake.compiled) == 3 == len(set(fake.compiled)) and len(fake.calls) == 3
    )  # no CPU session: nothing to compile
    again = warm_up(EmbeddingEngine(TINY_ST, execution="inline", buckets=[48, 64]))
    done = "compiled" if summary else "opened"
    assert [(s.action, s.before) for s in again] == [("skipped", done)] * 3 and len(fake.calls) == 3
    wider = warm_up(EmbeddingEngine(TINY_ST, execution="inline", buckets=[48, 64, 96]))  # a new bucket: only it
    assert [s.action for s in wider] == ["skipped", "skipped", "compiled", "skipped"] and len(fake.calls) == 4


def test_a_bucket_the_cpu_session_covers_is_neither_compiled_nor_warmed(npu, monkeypatch):
    # Inputs of at most cpu_max_tokens go to the CPU: a bucket that short would never run.
    fake = stand_in(monkeypatch)
    engine = EmbeddingEngine(TINY_ST, execution="inline", buckets=[16, 32, 64])
    assert engine.buckets == (64, 128) and engine.session_shapes() == [(1, 64), (1, 128), None]
    assert [s.label for s in warm_up(engine)] == ["1x64", "1x128"] and len(fake.compiled) == 2
    every = EmbeddingEngine(TINY_ST, execution="inline", buckets=[16, 32, 64], cpu_max_tokens=0)
    assert every.buckets == (16, 32, 64, 128)


def test_warmup_on_the_cpu_opens_each_session_once_and_a_second_run_does_nothing(monkeypatch, tmp_path, capsys):
    from ryzenai_cli.main import main

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    fake = stand_in(monkeypatch)
    models = [str(TINY_ST), str(CROSS), str(TINY_LLAMA)]
    assert main(["warmup", *models, "--json"]) == 0
    first = json.loads(capsys.readouterr().out)["models"]
    assert [[(s["shape"], s["action"], s["ran_on"]) for s in m["shapes"]] for m in first] == [
        [("dynamic", "opened", "cpu")],
        [("dynamic", "opened", "cpu")],
        [],
    ]
    assert len(fake.calls) == 2
    assert main(["warmup", *models]) == 0
    assert "nothing to do: all 2 shape(s) were warm already" in capsys.readouterr().out and len(fake.calls) == 2
    assert main(["warmup", str(tmp_path), str(TINY_ST)]) == 1  # not a model: said, and the others go on
    out, err = capsys.readouterr()
    assert "no model layout the plugin knows; missing: an ONNX export" in err and "all 1 shape(s) were warm" in out
