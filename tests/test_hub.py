"""Models by name, resolved through a pre-filled Hugging Face cache (never the network)."""

from __future__ import annotations

import shutil

import pytest

from conftest import TINY_LLAMA
from ryzenai_core import ChatMessage, Engine, ModelNotFoundError
from ryzenai_core.hub import resolve_model
from ryzenai_core.models import default_model_path
from ryzenai_core.options import validated_options

REPO = "amd/Llama-3.2-1B_rai_1.8.0_npu_4K"
COMMIT = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture
def hf_cache(tmp_path, monkeypatch):
    """A Hugging Face cache holding REPO, laid out as huggingface_hub writes it."""
    cache = tmp_path / "hub"
    repo = cache / ("models--" + REPO.replace("/", "--"))
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(COMMIT)
    shutil.copytree(TINY_LLAMA, repo / "snapshots" / COMMIT)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return cache


def test_repo_id_resolves_from_the_cache_offline(hf_cache):
    path = resolve_model(REPO, cache_dir=hf_cache)
    assert path.name == COMMIT and (path / "genai_config.json").is_file()


def test_engine_accepts_a_repo_id(hf_cache, monkeypatch):
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(hf_cache))  # what HF_HUB_CACHE sets
    e = Engine.get(REPO, execution="inline")
    c = e.generate([ChatMessage("user", "hi")], validated_options(max_new_tokens=3, temperature=0))
    assert c.usage.completion_tokens == 3


def test_offline_without_a_cached_copy_is_a_clear_error(hf_cache):
    with pytest.raises(ModelNotFoundError, match=r"amd/Qwen3-4B_rai_1.8.0_npu_4K is not in the Hugging Face cache.*huggingface-cli download"):
        resolve_model("amd/Qwen3-4B_rai_1.8.0_npu_4K", cache_dir=hf_cache)


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
    assert "RepositoryNotFoundError" in message and "huggingface-cli login" in message
    assert not list(hf_cache.glob("models--amd--No-Such-Model/snapshots/*"))  # nothing half-written was kept
    # The command line shows the same message, without a traceback.
    import huggingface_hub.constants

    from ryzenai_cli.main import main

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(hf_cache))
    assert main(["info", "amd/No-Such-Model"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: could not download amd/No-Such-Model") and "Traceback" not in err
