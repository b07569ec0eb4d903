"""Models by name, resolved through a pre-filled Hugging Face cache (never the network).

The cache is made as huggingface_hub's downloads make it (:mod:`hf_cache`): every snapshot file
is a relative link into the repository's ``blobs/``.
"""

from __future__ import annotations

import json
import os

import pytest

from conftest import REPLICAS, TINY_LLAMA
from hf_cache import COMMIT, cache_repository
from ryzenai_core import ChatMessage, Engine, ModelNotFoundError, ModelPackage, UnsafePathError
from ryzenai_core.models import default_model_path
from ryzenai_core.options import validated_options
from ryzenai_core.package.hub import package_name, resolve_model

REPO = "amd/Llama-3.2-1B_rai_1.8.0_npu_4K"
EMBEDDING_REPO = "amd/tiny-bert-st"
LLAMA_NPU = REPLICAS / "Llama-3.2-1B_rai_1.8.0_npu_4K"
TINY_ST = REPLICAS.parent / "embeddings" / "tiny-bert-st"


@pytest.fixture
def hf_cache(tmp_path, monkeypatch):
    """A Hugging Face cache holding REPO (the NPU replica) and EMBEDDING_REPO; downloads off.

    ``HF_HUB_CACHE`` is pointed at it, as the variable does for huggingface_hub.
    """
    import huggingface_hub.constants

    cache = tmp_path / "hub"
    cache_repository(cache, REPO, LLAMA_NPU)
    cache_repository(cache, EMBEDDING_REPO, TINY_ST)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(cache))
    return cache


def test_repo_id_resolves_from_the_cache_offline(hf_cache):
    path = resolve_model(REPO, cache_dir=hf_cache)
    assert path.name == COMMIT and (path / "genai_config.json").is_file()
    link = os.readlink(path / "genai_config.json")
    assert link.startswith("../../blobs/")  # the layout huggingface_hub makes


def test_a_snapshot_of_links_opens_under_the_repository_name(hf_cache):
    """The package check accepts links into the repository's blobs/ and names the package after it."""
    pkg = ModelPackage.open(resolve_model(REPO))
    assert pkg.name == "Llama-3.2-1B_rai_1.8.0_npu_4K" == package_name(pkg.path)
    assert (pkg.release, pkg.built_for) == ("1.8.0", "1.8.0")
    assert pkg.release_source.startswith("repository name")
    assert pkg.decoder_file == pkg.path / "model.onnx" and pkg.decoder_file.is_symlink()
    assert pkg.prefill_buckets_found[-1] == 4096 and pkg.mode.value == "full-fusion"
    assert pkg.missing_files == () and pkg.lfs_pointers == ()
    assert pkg.required_files()[-1] == pkg.path / "model.onnx.data"  # found beside the link, not the blob
    assert pkg.budget.prompt_limit == 4095


def test_a_snapshot_link_outside_the_repository_is_refused(hf_cache, tmp_path):
    snapshot = resolve_model(REPO)
    outside = tmp_path / "outside.onnx"
    outside.write_bytes(b"x")
    (snapshot / "model.onnx").unlink()
    (snapshot / "model.onnx").symlink_to(outside)
    with pytest.raises(UnsafePathError, match="resolves to .*outside.onnx, outside the model folder"):
        ModelPackage.open(snapshot)


def test_a_snapshot_config_naming_the_blobs_is_refused(hf_cache):
    """A config may name files of its own folder only, even when they are links into blobs/."""
    snapshot = resolve_model(REPO)
    config = json.loads((snapshot / "genai_config.json").read_text())
    blob = os.readlink(snapshot / "model.onnx")  # ../../blobs/<sha>
    config["model"]["decoder"]["filename"] = blob
    (snapshot / "genai_config.json").unlink()
    (snapshot / "genai_config.json").write_text(json.dumps(config))
    with pytest.raises(UnsafePathError, match="points outside the model folder"):
        ModelPackage.open(snapshot)


def test_both_faces_and_both_embedders_take_a_repo_id_offline(hf_cache):
    from langchain_ryzenai import ChatRyzenAI, RyzenAIEmbeddings
    from llamaindex_ryzenai import RyzenAIEmbedding, RyzenAILLM

    chat = ChatRyzenAI(model=REPO, provider="cpu", execution="inline", temperature=0, max_tokens=3)
    msg = chat.invoke("hi")
    assert msg.usage_metadata["output_tokens"] == 3 and msg.response_metadata["model_name"] == REPO
    llm = RyzenAILLM(model=REPO, provider="cpu", execution="inline", temperature=0, max_new_tokens=3)
    assert llm.complete("hi").raw["usage"]["completion_tokens"] == 3
    vectors = RyzenAIEmbeddings(model=EMBEDDING_REPO, onnx_file="onnx/model.onnx").embed_documents(["a", "b"])
    assert len(vectors) == 2 and len(vectors[0]) == 32
    assert len(RyzenAIEmbedding(model=EMBEDDING_REPO).get_text_embedding("a")) == 32


def test_info_of_a_repo_id_names_the_repository(hf_cache, capsys):
    from ryzenai_cli.main import main

    assert main(["info", REPO, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["name"] == "Llama-3.2-1B_rai_1.8.0_npu_4K" and out["path"].endswith(COMMIT)
    assert (out["release"], out["built_for"]) == ("1.8.0", "1.8.0")
    assert main(["info", EMBEDDING_REPO, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["name"] == "tiny-bert-st"


def test_engine_accepts_a_repo_id(hf_cache):
    cache_repository(hf_cache, "amd/tiny-llama", TINY_LLAMA)
    e = Engine.get("amd/tiny-llama", execution="inline")
    c = e.generate([ChatMessage("user", "hi")], validated_options(max_new_tokens=3, temperature=0))
    assert c.usage.completion_tokens == 3 and e.package.name == "tiny-llama"


def test_offline_without_a_cached_copy_is_a_clear_error(hf_cache):
    """The fix names the installed huggingface_hub's own command (`hf download` since 0.34)."""
    with pytest.raises(ModelNotFoundError) as info:
        resolve_model("amd/Qwen3-4B_rai_1.8.0_npu_4K", cache_dir=hf_cache)
    message = str(info.value)
    assert "amd/Qwen3-4B_rai_1.8.0_npu_4K is not in the Hugging Face cache" in message
    assert "run `hf download amd/Qwen3-4B_rai_1.8.0_npu_4K`" in message and "huggingface-cli" not in message


OLDER = "fedcba9876543210fedcba9876543210fedcba98"


def test_a_requested_revision_of_a_cached_repository_is_that_revision(hf_cache):
    """A cache holding two revisions (main, and the tag v1 at another commit): each request gets its own."""
    older = cache_repository(hf_cache, REPO, TINY_LLAMA, revision=OLDER, ref="v1")
    main = older.parent / COMMIT
    assert resolve_model(REPO) == resolve_model(REPO, revision="main") == main
    assert resolve_model(REPO, revision="v1") == resolve_model(REPO, revision=OLDER) == older
    assert ModelPackage.open(resolve_model(REPO, revision="v1")).mode.value == "plain"  # tiny-llama's files
    with pytest.raises(ModelNotFoundError, match=f"{REPO} is not in the Hugging Face cache"):
        resolve_model(REPO, revision="v2")  # offline, never another revision in its place
    with pytest.raises(ModelNotFoundError, match="not in the Hugging Face cache"):
        resolve_model(REPO, revision="0" * 40)


def test_embedded_model_by_name():
    assert resolve_model("tiny-qa-llama") == default_model_path()
    assert resolve_model("tiny-random-llama") == default_model_path().parent / "tiny-random-llama"


def test_neither_folder_nor_repo_id(tmp_path):
    with pytest.raises(ModelNotFoundError, match="model folder .* does not exist"):
        resolve_model(str(tmp_path / "missing" / "model"))
    with pytest.raises(ModelNotFoundError, match="neither a folder nor a Hugging Face repository id"):
        resolve_model("no-such-model")


@pytest.fixture
def empty_hub(monkeypatch):
    """A Hugging Face endpoint on this machine that knows no repository (every request: 404)."""
    import http.server
    import threading

    import huggingface_hub.constants

    class NotFound(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(404)
            self.send_header("Content-Type", "application/json")
            self.send_header("X-Error-Code", "RepoNotFound")
            self.end_headers()
            self.wfile.write(b'{"error": "Repository not found"}')

        do_HEAD = do_GET

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), NotFound)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    monkeypatch.setattr(huggingface_hub.constants, "ENDPOINT", f"http://127.0.0.1:{server.server_port}")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    yield server
    server.shutdown()
    server.server_close()


def test_failed_download_is_a_clear_error(hf_cache, empty_hub, monkeypatch, capsys):
    with pytest.raises(ModelNotFoundError) as info:
        resolve_model("amd/No-Such-Model", cache_dir=hf_cache)
    message = str(info.value)
    assert message.startswith("could not download amd/No-Such-Model from the Hugging Face Hub: ")
    assert "RepositoryNotFoundError" in message and "`hf auth login`" in message
    assert ".." not in message.replace("...", "")  # one full stop between the hub's text and ours
    assert not list(hf_cache.glob("models--amd--No-Such-Model/snapshots/*"))  # nothing half-written was kept
    # The command line shows the same message, without a traceback.
    import huggingface_hub.constants

    from ryzenai_cli.main import main

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(hf_cache))
    assert main(["info", "amd/No-Such-Model"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: could not download amd/No-Such-Model") and "Traceback" not in err


def test_the_hubs_own_offline_refusal_ends_in_one_full_stop(hf_cache, monkeypatch):
    """huggingface_hub offline (its constant) while ours is not: its sentence, then ours, one full stop between."""
    import huggingface_hub.constants

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(ModelNotFoundError) as info:
        resolve_model("amd/Not-Cached", cache_dir=hf_cache)
    message = str(info.value)
    assert "outgoing traffic has been disabled" in message and ".." not in message
    assert "set 'HF_HUB_OFFLINE=0' as environment variable. Check the repository id" in message


# ---------------------------------------------------------------------- names users type
def test_a_bare_amd_package_name_resolves_to_amd_in_the_cache(hf_cache):
    """People write AMD's package names without the owner; the cache holds them as amd/<name>."""
    path = resolve_model("Llama-3.2-1B_rai_1.8.0_npu_4K")
    assert path == resolve_model(REPO) and ModelPackage.open(path).name == "Llama-3.2-1B_rai_1.8.0_npu_4K"
    engine = Engine.get("Llama-3.2-1B_rai_1.8.0_npu_4K", provider="cpu", execution="inline")
    try:
        assert engine.package.path == path.resolve()
    finally:
        engine.close()


def test_a_bare_amd_name_not_in_the_cache_names_its_repository_and_the_pull(hf_cache):
    with pytest.raises(ModelNotFoundError) as err:
        resolve_model("Qwen3-4B_rai_1.8.0_npu_4K")
    text = str(err.value)
    assert "AMD's repository amd/Qwen3-4B_rai_1.8.0_npu_4K is not in the Hugging Face cache" in text
    assert (
        "`ryzenai-llm pull amd/Qwen3-4B_rai_1.8.0_npu_4K`" in text and "model='amd/Qwen3-4B_rai_1.8.0_npu_4K'" in text
    )
    with pytest.raises(ModelNotFoundError, match="neither a folder nor a Hugging Face repository id"):
        resolve_model("Qwen3-4B-npu-4K")  # not an AMD package name: no guess


def test_a_ryzen_ai_1_9_package_opens_with_every_limit_from_its_config(hf_cache, copy_package):
    """1.9 names carry no _4K/_16K: the window and prompt limit come from genai_config.json and rai_config.json."""
    folder = copy_package(LLAMA_NPU, "Llama-3.2-1B_rai_1.9.0_npu")
    cfg = json.loads((folder / "genai_config.json").read_text())
    cfg["search"]["max_length"] = 8192
    (folder / "genai_config.json").write_text(json.dumps(cfg))
    rai = json.loads((folder / "rai_config.json").read_text())
    rai["max_prompt_length"]["1.9.0"] = 6144
    (folder / "rai_config.json").write_text(json.dumps(rai))
    cache_repository(hf_cache, "amd/Llama-3.2-1B_rai_1.9.0_npu", folder)
    pkg = ModelPackage.open(resolve_model("Llama-3.2-1B_rai_1.9.0_npu"))
    assert (pkg.name, pkg.built_for, pkg.release) == ("Llama-3.2-1B_rai_1.9.0_npu", "1.9.0", "1.9.0")
    assert (pkg.budget.window, pkg.budget.prompt_limit) == (8192, 6144)
    assert "max_prompt_length['1.9.0'] for release 1.9.0" in pkg.budget.prompt_limit_source


def test_the_readme_names_amd_packages_by_ids_that_resolve():
    """Every AMD package an example of the README or docs/ names is a repository id (amd/<name>), not a bare name."""
    import re

    from conftest import ROOT

    named = []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        named += re.findall(
            r"""(?:model=|Engine\.get\()["']([^"']*_rai_[^"']*)["']""", page.read_text(encoding="utf-8")
        )
    assert named and all(n.startswith("amd/") or n.startswith("C:/") for n in named), named
