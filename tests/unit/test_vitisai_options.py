"""The VitisAI provider options an NPU encoder session gets (ryzenai_core.embeddings.vitisai): no NPU needed."""

from __future__ import annotations

import importlib.metadata
import json
import re
from pathlib import Path

import pytest

from ryzenai_core.embeddings import vitisai
from ryzenai_core.embeddings.vitisai import cache_key, release_tag, shipped_config_file, vitisai_options
from ryzenai_core.errors import ConfigError, InvalidRequestError

DIGEST = "ab" * 32


def options(**kw: object) -> dict[str, str]:
    args: dict[str, object] = {
        "model_name": "bge-small-en-v1.5",
        "model_digest": DIGEST,
        "shape": (1, 128),
        "ort_version": "1.27.0",
    }
    args.update(kw)
    return vitisai_options(**args)  # type: ignore[arg-type]


@pytest.fixture(autouse=True)
def _user_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    return tmp_path / "xdg"


def test_the_shipped_configuration_is_amds_transformer_configuration() -> None:
    config = json.loads(shipped_config_file().read_text(encoding="utf-8"))
    # As RyzenAI-SW's RAG-OGA custom_embedding/vaiml_config.json and its DistilBERT BF16 example have it.
    assert [p["name"] for p in config["passes"]] == ["init", "vaiml_partition"]
    assert [p["plugin"] for p in config["passes"]] == ["vaip-pass_init", "vaip-pass_vaiml_partition"]
    assert config["passes"][1]["vaiml_config"] == {"preferred_data_storage": "unvectorized"}
    assert config["target"] == "VAIML"
    assert config["targets"] == [{"name": "VAIML", "pass": ["init", "vaiml_partition"]}]


def test_an_encoder_gets_the_shipped_config_a_per_user_cache_and_a_key(_user_cache: Path) -> None:
    got = options()
    assert set(got) == {"config_file", "cache_dir", "cache_key"}
    assert Path(got["config_file"]) == shipped_config_file()
    assert Path(got["cache_dir"]) == _user_cache / "ryzenai-llm" / "vitisai"
    assert re.fullmatch(r"bge-small-en-v1\.5-1x128-[0-9a-f]{12}", got["cache_key"])
    assert all(isinstance(v, str) for v in got.values())


def test_the_key_is_the_same_for_the_same_model_shape_release_and_config() -> None:
    assert options()["cache_key"] == options()["cache_key"]


@pytest.mark.parametrize(
    "change",
    [
        {"model_digest": "cd" * 32},
        {"shape": (1, 256)},
        {"shape": (8, 128)},
        {"ort_version": "1.28.0"},
        {"driver_version": "32.0.203.280"},
    ],
    ids=["model file", "sequence", "rows", "onnxruntime", "driver"],
)
def test_a_new_model_file_shape_or_release_gets_a_new_key(change: dict[str, object]) -> None:
    assert options(**change)["cache_key"] != options()["cache_key"]


def test_a_new_ep_distribution_version_gets_a_new_key(monkeypatch: pytest.MonkeyPatch) -> None:
    before = options()["cache_key"]
    real = importlib.metadata.version

    def version(dist: str) -> str:
        return "1.8.0" if dist == "onnxruntime-providers-ryzenai" else real(dist)

    monkeypatch.setattr(importlib.metadata, "version", version)
    assert "onnxruntime-providers-ryzenai=1.8.0" in release_tag("1.27.0")
    assert options()["cache_key"] != before


def test_release_tag_names_what_is_installed_in_a_fixed_order(monkeypatch: pytest.MonkeyPatch) -> None:
    versions = {"onnxruntime-vitisai": "1.27.0", "voe": "1.8.0"}

    def version(dist: str) -> str:
        if dist in versions:
            return versions[dist]
        raise importlib.metadata.PackageNotFoundError(dist)

    monkeypatch.setattr(importlib.metadata, "version", version)
    assert release_tag("1.27.0", driver_version="32.0.203.280") == (
        "ort1.27.0 onnxruntime-vitisai=1.27.0 voe=1.8.0 drv32.0.203.280"
    )
    assert release_tag("1.27.0") == "ort1.27.0 onnxruntime-vitisai=1.27.0 voe=1.8.0"


def test_a_users_own_config_file_is_passed_and_its_content_keys_the_cache(tmp_path: Path) -> None:
    mine = tmp_path / "my config.json"
    mine.write_text(json.dumps({"passes": [], "target": "VAIML"}), encoding="utf-8")
    got = options(overrides={"config_file": str(mine)})
    assert got["config_file"] == str(mine)
    assert got["cache_key"] != options()["cache_key"]
    first = got["cache_key"]
    mine.write_text(json.dumps({"passes": [], "target": "VAIML", "x": 1}), encoding="utf-8")
    assert options(overrides={"config_file": str(mine)})["cache_key"] != first


@pytest.mark.parametrize(
    ("content", "says"),
    [(None, "cannot be read"), ("{not json", "is not JSON"), ("[1, 2]", "holds a list, not a JSON object")],
    ids=["missing", "not json", "array"],
)
def test_a_bad_config_file_is_a_config_error_naming_it(tmp_path: Path, content: str | None, says: str) -> None:
    path = tmp_path / "vai.json"
    if content is not None:
        path.write_text(content, encoding="utf-8")
    with pytest.raises(ConfigError, match=says) as info:
        options(overrides={"config_file": str(path)})
    assert str(path) in str(info.value)


def test_the_users_options_win_and_are_strings(tmp_path: Path) -> None:
    got = options(
        overrides={
            "cache_dir": str(tmp_path / "c"),
            "cache_key": "mine",
            "enable_cache_file_io_in_mem": 0,
            "ai_analyzer_visualization": True,
        }
    )
    assert got["cache_dir"] == str(tmp_path / "c")
    assert got["cache_key"] == "mine"
    assert got["enable_cache_file_io_in_mem"] == "0"
    assert got["ai_analyzer_visualization"] == "True"  # what onnxruntime's own str() would pass


def test_the_engine_cache_dir_is_used_when_given(tmp_path: Path) -> None:
    assert options(cache_dir=tmp_path / "engine")["cache_dir"] == str(tmp_path / "engine")


def test_amds_older_option_names_are_renamed() -> None:
    # AMD's RAG example passes "cacheKey"; the 1.8 docs name it cache_key.
    got = options(overrides={"cacheKey": "modelcachekey_bge", "cacheDir": "/tmp/x"})
    assert got["cache_key"] == "modelcachekey_bge"
    assert got["cache_dir"] == "/tmp/x"
    assert "cacheKey" not in got and "cacheDir" not in got


def test_an_option_under_both_names_is_refused() -> None:
    with pytest.raises(InvalidRequestError, match="'cacheKey' and 'cache_key'"):
        options(overrides={"cacheKey": "a", "cache_key": "b"})


def test_keys_stay_short_and_plain_for_any_name() -> None:
    key = cache_key("Ünïcode model — " + "x" * 200, DIGEST, (1, 512), "ort1.27.0", "00")
    assert re.fullmatch(r"[a-z0-9._-]+", key)
    assert len(key) <= 32 + len("-1x512-") + 12
    assert cache_key("///", DIGEST, (1, 32), "r", "c").startswith("model-1x32-")


@pytest.mark.parametrize("shape", [(0, 128), (1, 0), (-1, 8)])
def test_a_shape_without_positive_sizes_is_refused(shape: tuple[int, int]) -> None:
    with pytest.raises(InvalidRequestError, match="positive sizes"):
        cache_key("m", DIGEST, shape, "r", "c")


def test_a_missing_shipped_config_says_how_to_repair(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(vitisai, "SHIPPED_CONFIG", "absent.json")
    with pytest.raises(ConfigError, match="reinstall ryzenai-llm"):
        shipped_config_file()
