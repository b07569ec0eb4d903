"""One lifecycle for every model: one registry, one close_all, one provider vocabulary.

LLM engines and encoder engines live in the same registry, close together, take the same
provider names with the same errors; their workers share the deadlines and the replacement
(tests/integration/test_embeddings_worker.py: a hung or dead encoder worker).
"""

from __future__ import annotations

import pytest

import ryzenai_core
from conftest import FIXTURES, TINY_LLAMA, process_alive
from langchain_ryzenai import ChatRyzenAI, RyzenAIEmbeddings
from langchain_ryzenai import RyzenAIRerank as LangChainRerank
from llamaindex_ryzenai import RyzenAIEmbedding, RyzenAILLM
from llamaindex_ryzenai import RyzenAIRerank as LlamaIndexRerank
from ryzenai_core import InvalidRequestError, RuntimeNotAvailableError, lifecycle
from ryzenai_core.embeddings.embedding import EmbeddingEngine
from ryzenai_core.embeddings.engine import EncoderEngine
from ryzenai_core.engine.engine import Engine
from ryzenai_core.options import validated_options
from ryzenai_core.rerank.engine import RerankEngine

TINY_ST = FIXTURES / "embeddings" / "tiny-bert-st"
CROSS = FIXTURES / "rerank" / "tiny-bert-cross-encoder"
NPU_REPLICA = FIXTURES / "replicas" / "Llama-3.2-1B_rai_1.8.0_npu_4K"


@pytest.fixture
def fresh_registry(monkeypatch):
    """A registry of this test's own, as the process's one for both kinds of engine."""
    registry = lifecycle.Registry()
    monkeypatch.setattr(lifecycle, "REGISTRY", registry)
    monkeypatch.setattr(Engine, "registry", registry)
    monkeypatch.setattr(EncoderEngine, "registry", registry)
    yield registry
    registry.close_all()


def test_llms_and_encoders_share_one_registry_and_close_all_closes_both(copy_package, fresh_registry):
    llm = Engine.get(copy_package(TINY_LLAMA, "lifecycle-llm"), execution="process")
    embedder = EmbeddingEngine.get(str(TINY_ST), execution="process")
    reranker = RerankEngine.get(str(CROSS), execution="process")
    assert set(map(id, fresh_registry.engines().values())) == {id(llm), id(embedder), id(reranker)}
    assert list(fresh_registry.engines(Engine).values()) == [llm]
    assert EmbeddingEngine.get(str(TINY_ST), execution="process") is embedder  # shared by its settings

    llm.load()
    vectors = embedder.embed(["vantor"]).vectors
    scores = reranker.rerank("who?", ["vantor"]).scores
    pids = [llm.worker_pid(), *embedder.worker_pids(), *reranker.worker_pids()]
    assert len(pids) == 3 and all(pid is not None and process_alive(pid) for pid in pids)

    ryzenai_core.close_all()  # the one close_all (Engine.close_all is the same)
    assert not any(process_alive(pid) for pid in pids if pid is not None)
    assert llm.worker_pid() is None and embedder.worker_pids() == [] and reranker.worker_pids() == []

    # each opens again on its next call, in a new worker
    assert llm.generate([ryzenai_core.ChatMessage("user", "hi")], validated_options(max_new_tokens=2)).text is not None
    assert embedder.embed(["vantor"]).vectors == vectors and reranker.rerank("who?", ["vantor"]).scores == scores
    assert not {llm.worker_pid(), *embedder.worker_pids(), *reranker.worker_pids()} & set(pids)


def test_forget_picks_one_kind_and_the_rest_stay_shared(copy_package, fresh_registry):
    llm = Engine.get(copy_package(TINY_LLAMA, "lifecycle-forget"), execution="inline")
    embedder = EmbeddingEngine.get(str(TINY_ST))
    # a key of the other kind never reaches the picker (an LLM slot has .key.path, an encoder's has .path)
    assert fresh_registry.forget(lambda slot: slot.key.path.endswith("lifecycle-forget"), Engine) == [llm]
    assert list(fresh_registry.engines().values()) == [embedder]


# -- one provider vocabulary ---------------------------------------------------------------------


ENCODERS = [(EmbeddingEngine, TINY_ST), (RerankEngine, CROSS)]
FACES = [
    (ChatRyzenAI, TINY_LLAMA),
    (RyzenAILLM, TINY_LLAMA),
    (RyzenAIEmbeddings, TINY_ST),
    (RyzenAIEmbedding, TINY_ST),
    (LangChainRerank, CROSS),
    (LlamaIndexRerank, CROSS),
]
UNKNOWN = r"provider 'vitis' is not supported; use one of 'auto', 'npu', 'cpu', 'cuda', 'dml'"


def test_an_unknown_provider_is_the_same_error_for_every_kind_of_model():
    with pytest.raises(InvalidRequestError, match=UNKNOWN):
        Engine.get(TINY_LLAMA, provider="vitis")
    for cls, folder in ENCODERS:
        with pytest.raises(InvalidRequestError, match=UNKNOWN):
            cls(folder, provider="vitis")


@pytest.mark.parametrize(
    ("cls", "folder"),
    FACES,
    ids=lambda v: getattr(v, "__module__", "").split(".")[0] + "." + getattr(v, "__name__", ""),
)
def test_every_face_takes_the_same_provider_names_and_refuses_the_same_way(cls, folder):
    with pytest.raises(ValueError, match=UNKNOWN):
        cls(model=str(folder), provider="vitis")
    for provider in ("auto", "cpu", None):
        assert cls(model=str(folder), provider=provider).provider == provider


def test_auto_is_the_package_s_own_for_an_llm_and_npu_needs_a_ryzen_ai_package(copy_package):
    folder = copy_package(TINY_LLAMA, "lifecycle-provider")
    assert Engine.get(folder, provider="auto", execution="inline") is Engine.get(folder, execution="inline")
    with pytest.raises(InvalidRequestError, match=r"provider='npu' runs an AMD Ryzen AI package .* plain ONNX package"):
        Engine.get(folder, provider="npu", execution="inline")
    replica = copy_package(NPU_REPLICA, "lifecycle-npu")
    engine = Engine.get(replica, provider="npu", execution="inline")
    assert engine is Engine.get(replica, execution="inline") and engine.key.provider is None  # the package's own


@pytest.mark.parametrize(("cls", "folder"), ENCODERS, ids=["embedding", "rerank"])
@pytest.mark.parametrize(
    ("provider", "words"),
    [
        ("npu", r"provider='npu' needs onnxruntime's VitisAIExecutionProvider.*Ryzen AI environment.*provider='cpu'"),
        ("cuda", r"provider='cuda' needs onnxruntime's CUDAExecutionProvider.*install onnxruntime-gpu.*provider='cpu'"),
        ("dml", r"provider='dml' needs onnxruntime's DmlExecutionProvider.*onnxruntime-directml.*provider='cpu'"),
    ],
)
def test_an_encoder_provider_onnxruntime_lacks_is_a_typed_error_naming_what_to_install(cls, folder, provider, words):
    with pytest.raises(RuntimeNotAvailableError, match=words):
        cls(folder, provider=provider)


def test_an_encoder_on_an_accelerator_runs_it_with_the_cpu_behind(monkeypatch):
    import onnxruntime as ort

    monkeypatch.setattr(ort, "get_available_providers", lambda: ["CUDAExecutionProvider", "CPUExecutionProvider"])
    engine = EmbeddingEngine(TINY_ST, provider="cuda")
    assert (engine.provider, engine.static) == ("CUDAExecutionProvider", False)  # dynamic shapes: not the NPU
    assert engine.session_spec(None).providers == ("CUDAExecutionProvider", "CPUExecutionProvider")
