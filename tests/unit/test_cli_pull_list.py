"""``ryzenai-llm pull``, ``list`` and ``--version`` against a Hugging Face cache laid out as
huggingface_hub leaves it (tests/hf_cache.py), offline."""

from __future__ import annotations

import json
import os
from importlib.metadata import version
from pathlib import Path

import huggingface_hub.constants
import pytest
from huggingface_hub import scan_cache_dir, snapshot_download
from huggingface_hub.file_download import repo_folder_name

from conftest import FIXTURES, REPLICAS, TINY_LLAMA
from hf_cache import COMMIT, cache_repository
from ryzenai_cli.listing import _size, cached_entries, folder_entries, package_kind
from ryzenai_cli.main import main
from ryzenai_core import ModelNotFoundError
from ryzenai_core.package.hub import pull_model

NPU_REPO = "amd/Llama-3.2-1B_rai_1.8.0_npu_4K"
PLAIN_REPO = "ryzenai-llm/tiny-llama"
EMBED_REPO = "ryzenai-llm/tiny-bert-st"
MISSING_REPO = "amd/Qwen3-4B_rai_1.8.0_npu_4K"
TINY_BERT = FIXTURES / "embeddings" / "tiny-bert-st"
RERANK = FIXTURES / "rerank"


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def cache(tmp_path: Path) -> Path:
    """A cache holding an NPU replica, a plain model and an embedding model, and one repository that is neither."""
    folder = tmp_path / "hub"
    cache_repository(folder, NPU_REPO, REPLICAS / "Llama-3.2-1B_rai_1.8.0_npu_4K")
    cache_repository(folder, PLAIN_REPO, TINY_LLAMA)
    cache_repository(folder, EMBED_REPO, TINY_BERT)
    pytorch = tmp_path / "pytorch-checkpoint"
    pytorch.mkdir()
    (pytorch / "config.json").write_text('{"architectures": ["LlamaForCausalLM"]}', encoding="utf-8")
    (pytorch / "model.safetensors").write_bytes(b"\0" * 64)
    cache_repository(folder, "someone/pytorch-checkpoint", pytorch)
    return folder


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


@pytest.fixture
def unreachable_hub(monkeypatch: pytest.MonkeyPatch) -> None:
    """The Hub's address is a closed local port: a machine whose network is down (HF_HUB_OFFLINE unset)."""
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "ENDPOINT", "http://127.0.0.1:9")


# ---------------------------------------------------------------------- the cache helper
def test_the_cache_is_what_huggingface_hub_reads(cache):
    info = scan_cache_dir(cache)
    assert info.warnings == []
    repos = {r.repo_id: r for r in info.repos}
    assert set(repos) == {NPU_REPO, PLAIN_REPO, EMBED_REPO, "someone/pytorch-checkpoint"}
    (rev,) = repos[NPU_REPO].revisions
    assert rev.refs == frozenset({"main"})
    snapshot = Path(snapshot_download(NPU_REPO, cache_dir=cache, local_files_only=True))
    assert snapshot == rev.snapshot_path
    config = snapshot / "genai_config.json"
    assert config.is_symlink() and os.readlink(config).startswith(os.path.join("..", "..", "blobs"))
    nested = next(p for p in snapshot.rglob("*") if p.is_symlink() and p.parent != snapshot)
    assert os.readlink(nested).startswith(os.path.join("..", "..", "..", "blobs"))
    assert config.read_bytes() == (REPLICAS / "Llama-3.2-1B_rai_1.8.0_npu_4K" / "genai_config.json").read_bytes()
    targets = {(p.parent / os.readlink(p)).resolve() for p in snapshot.rglob("*") if p.is_symlink()}
    blobs = cache / repo_folder_name(repo_id=NPU_REPO, repo_type="model") / "blobs"
    assert targets == {p.resolve() for p in blobs.iterdir()}  # every file a link, one blob per content


# ---------------------------------------------------------------------- pull
def test_pull_of_a_cached_repository_works_offline(cache, offline, capsys):
    code, out, err = run(capsys, "pull", NPU_REPO, "--cache-dir", str(cache))
    assert code == 0, err
    snapshot = Path(snapshot_download(NPU_REPO, cache_dir=cache, local_files_only=True))
    assert f"{NPU_REPO} is in {snapshot}" in out
    assert "full-fusion" in out and "1.8.0" in out  # info's description of the package
    verdict = next(line for line in out.splitlines() if line.startswith("loads here"))
    assert "no: " in verdict and "AMD's Ryzen AI EP library" in verdict  # this machine has no EP library


def test_pull_shows_whether_a_plain_model_loads_here(cache, offline, capsys):
    code, out, err = run(capsys, "pull", PLAIN_REPO, "--cache-dir", str(cache), "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["mode"] == "plain" and data["loads_here"] == {"ok": True, "problem": None}


def test_pull_of_an_uncached_repository_offline_is_the_typed_error(cache, offline, capsys):
    with pytest.raises(ModelNotFoundError, match="not in the Hugging Face cache"):
        pull_model(MISSING_REPO, cache_dir=cache)
    code, out, err = run(capsys, "pull", MISSING_REPO, "--cache-dir", str(cache))
    assert code == 2 and out == ""
    assert err.startswith("error: ") and MISSING_REPO in err and "HF_HUB_OFFLINE" in err


def test_pull_with_the_hub_unreachable_takes_the_cached_copy(cache, unreachable_hub):
    snapshot = snapshot_download(PLAIN_REPO, cache_dir=cache, local_files_only=True)
    assert pull_model(PLAIN_REPO, cache_dir=cache) == Path(snapshot)


@pytest.mark.parametrize("hub", ["offline", "unreachable_hub"])
def test_pull_of_a_revision_takes_that_cached_revision(cache, hub, request, capsys):
    """`pull --revision v1` without the Hub: the cached v1 (another commit than main), never main's snapshot."""
    request.getfixturevalue(hub)
    older = "fedcba9876543210fedcba9876543210fedcba98"
    snapshot = cache_repository(cache, PLAIN_REPO, TINY_BERT, revision=older, ref="v1")
    main = Path(snapshot_download(PLAIN_REPO, cache_dir=cache, local_files_only=True))
    assert main != snapshot
    assert pull_model(PLAIN_REPO, revision="v1", cache_dir=cache) == snapshot
    assert pull_model(PLAIN_REPO, cache_dir=cache) == main
    if hub == "offline":  # (huggingface_hub retries a commit's file list for 23 s when the Hub is unreachable)
        assert pull_model(PLAIN_REPO, revision=older, cache_dir=cache) == snapshot
    code, out, err = run(capsys, "pull", PLAIN_REPO, "--revision", "v1", "--cache-dir", str(cache))
    assert code == 0 and f"is in {snapshot}" in out, err
    with pytest.raises(ModelNotFoundError):
        pull_model(PLAIN_REPO, revision="v2", cache_dir=cache)


def test_pull_with_the_hub_unreachable_and_nothing_cached_says_so(cache, unreachable_hub):
    with pytest.raises(ModelNotFoundError, match=rf"could not download {MISSING_REPO}.*ConnectError"):
        pull_model(MISSING_REPO, cache_dir=cache)


@pytest.mark.parametrize("given", ["not a repo id", "./tiny-llama", "a/b/c"])
def test_pull_takes_repository_ids_only(given):
    with pytest.raises(ModelNotFoundError, match="is not a Hugging Face repository id"):
        pull_model(given)


# ---------------------------------------------------------------------- list
def test_list_shows_the_cached_packages(cache, offline, capsys):
    code, out, err = run(capsys, "list", "--cache-dir", str(cache))
    assert code == 0, err
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line.startswith(("amd/", "ryzenai-llm/"))}
    assert set(rows) == {NPU_REPO, PLAIN_REPO, EMBED_REPO}
    assert rows[NPU_REPO][1:5] == ["LLM", "full-fusion", "1.8.0", "4095"] and rows[NPU_REPO][-2:] == ["no", "[1]"]
    assert rows[PLAIN_REPO][1:5] == ["LLM", "plain", "-", "4095"] and rows[PLAIN_REPO][-1] == "yes"
    assert rows[EMBED_REPO][1:5] == ["embedding", "dynamic", "-", "128"] and rows[EMBED_REPO][-1] == "yes"
    assert "[1] Llama-3.2-1B_rai_1.8.0_npu_4K is a Ryzen AI package" in out
    assert "1 other cached repository is not an ONNX model package" in out


def test_list_json_sizes_are_the_revisions_on_disk(cache, capsys):
    code, out, _ = run(capsys, "list", "--cache-dir", str(cache), "--json")
    assert code == 0
    data = json.loads(out)
    sizes = {r.repo_id: r.revisions for r in scan_cache_dir(cache).repos}
    for entry in data["packages"]:
        (rev,) = sizes[entry["name"]]
        assert entry["size"] == rev.size_on_disk and entry["source"] == "cache"
        assert entry["path"] == str(rev.snapshot_path)
    assert data["other_cached_repos"] == 1


def test_list_of_folders(capsys, tmp_path):
    code, out, _ = run(capsys, "list", str(TINY_LLAMA), str(FIXTURES / "embeddings"), "--cache-dir", str(tmp_path))
    assert code == 0
    table = out.split("\n\n")[0]  # the notes, if any, follow a blank line
    names = [line.split()[0] for line in table.splitlines()[1:] if line.strip()]
    assert names == ["tiny-llama", "tiny-bert-st", "tiny-bert-static", "tiny-embeddinggemma"]
    assert "static" in next(line for line in out.splitlines() if line.startswith("tiny-bert-static"))


def test_list_names_every_revision_of_a_repository(tmp_path):
    cache = tmp_path / "hub"
    older = "f" * 40
    cache_repository(cache, PLAIN_REPO, TINY_LLAMA, revision=older)
    cache_repository(cache, PLAIN_REPO, TINY_LLAMA)  # refs/main now names COMMIT; the older one keeps no ref
    entries, others, _ = cached_entries(cache)
    assert others == 0
    assert [e.name for e in entries] == [f"{PLAIN_REPO}@main", f"{PLAIN_REPO}@{older[:12]}"]
    assert entries[0].path.endswith(COMMIT)


def test_list_with_no_cache_and_no_packages(capsys, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    code, out, _ = run(capsys, "list", str(empty), "--cache-dir", str(tmp_path / "no-cache"))
    assert code == 0 and "no model packages found" in out and "ryzenai-llm pull" in out


def test_list_of_a_missing_folder_is_an_error(capsys, tmp_path):
    code, _, err = run(capsys, "list", str(tmp_path / "nope"), "--cache-dir", str(tmp_path))
    assert code == 2 and "is not a folder" in err


def test_a_package_that_cannot_be_read_is_listed_with_why(copy_package):
    broken = copy_package(TINY_LLAMA, "broken")
    (broken / "genai_config.json").write_text("{not json", encoding="utf-8")
    (entry,) = folder_entries([broken])
    assert entry.kind == "LLM" and entry.mode is None and "not valid JSON" in entry.problem


def test_package_kinds(tmp_path):
    assert package_kind(TINY_LLAMA) == "LLM"
    assert package_kind(TINY_BERT) == "embedding"
    reranker = tmp_path / "reranker"
    reranker.mkdir()
    (reranker / "model.onnx").write_bytes(b"\0")
    (reranker / "tokenizer.json").write_text("{}", encoding="utf-8")
    (reranker / "config.json").write_text('{"architectures": ["BertForSequenceClassification"]}', encoding="utf-8")
    assert package_kind(reranker) == "reranker"
    (entry,) = folder_entries([reranker])
    assert entry.kind == "reranker" and "cannot be read" in entry.problem and "runs none" not in entry.problem
    assert package_kind(tmp_path) is None


def test_a_reranker_is_listed_as_loading_here():
    folders = [RERANK / "tiny-bert-cross-encoder", RERANK / "tiny-bert-cross-encoder-static"]
    dynamic, static = folder_entries(folders)
    assert (dynamic.kind, dynamic.mode, dynamic.problem) == ("reranker", "dynamic", None)
    assert (static.kind, static.mode, static.problem) == ("reranker", "static", None)
    assert dynamic.prompt_limit and dynamic.prompt_limit > 0


def test_a_two_label_classifier_is_listed_with_why_it_does_not_rerank():
    (entry,) = folder_entries([RERANK / "tiny-bert-2-labels"])
    assert entry.kind == "reranker" and entry.problem and "2 labels" in entry.problem


@pytest.mark.parametrize(("n", "text"), [(0, "0 B"), (999, "999 B"), (1000, "1.0 kB"), (3_300_000, "3.3 MB")])
def test_sizes(n, text):
    assert _size(n) == text


# ---------------------------------------------------------------------- --version
def test_version_comes_from_the_installed_metadata(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out == f"ryzenai-llm {version('ryzenai-llm')}\n"


# ---------------------------------------------------------------------- broken downloads
def test_list_json_carries_the_caches_warnings(cache, capsys):
    """A repository whose download stopped before its snapshot is a cache warning: it stays in the output."""
    (cache / repo_folder_name(repo_id="amd/broken-download", repo_type="model") / "blobs").mkdir(parents=True)
    code, out, _ = run(capsys, "list", "--cache-dir", str(cache), "--json")
    data = json.loads(out)
    assert code == 0 and any("models--amd--broken-download" in w for w in data["warnings"]), data["warnings"]
    code, out, _ = run(capsys, "list", "--cache-dir", str(cache))
    assert "warning: " in out and "models--amd--broken-download" in out


@pytest.mark.parametrize("how", ["link removed", "blob removed"])
def test_a_missing_weights_file_is_named_with_the_pull_that_fetches_it(cache, capsys, how):
    """model.onnx keeps its weights in model.onnx.data: a download that lost it is named before any load."""
    from ryzenai_core import ConfigError, ModelPackage
    from ryzenai_core.package.capabilities import load_problem

    snapshot = Path(snapshot_download(PLAIN_REPO, cache_dir=cache, local_files_only=True))
    link = snapshot / "model.onnx.data"
    if how == "link removed":
        link.unlink()
    else:
        Path(os.path.realpath(link)).unlink()
    pkg = ModelPackage.open(snapshot)
    assert pkg.external_data == {"model.onnx": ("model.onnx.data",)}
    with pytest.raises(ConfigError) as err:
        pkg.check_loadable()
    text = str(err.value)
    assert "model.onnx.data" in text and f"run `ryzenai-llm pull {PLAIN_REPO}` to fetch what is missing" in text
    assert "escapes model directory" not in text
    if how == "link removed":
        assert "model.onnx keeps its weights in it" in text
    else:
        assert pkg.broken_links == ("model.onnx.data",) and "which is not there" in text
    assert str(load_problem(pkg, provider="cpu")) == text
    code, out, _ = run(capsys, "list", "--cache-dir", str(cache), "--json")
    entry = next(e for e in json.loads(out)["packages"] if e["name"] == PLAIN_REPO)
    assert entry["problem"] == text
    code, out, _ = run(capsys, "info", str(snapshot))
    assert code == 0 and f"ryzenai-llm pull {PLAIN_REPO}" in out


def test_a_missing_weights_file_in_a_plain_folder_says_download_the_package(copy_package):
    from ryzenai_core import ConfigError, ModelPackage

    folder = copy_package(TINY_LLAMA)
    (folder / "model.onnx.data").unlink()
    with pytest.raises(
        ConfigError,
        match=r"model.onnx.data is missing from .* \(model.onnx keeps its weights in it\): download the complete package",
    ):
        ModelPackage.open(folder).check_loadable()
