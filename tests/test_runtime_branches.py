"""The code paths that only run under AMD's Ryzen AI build of onnxruntime-genai.

Only the installed distributions are stood in for: each test writes ``*.dist-info`` folders
(real package metadata) into a temporary directory and has :mod:`ryzenai_core.runtime` read
its distribution names and versions there. Everything else is real: the packages are the
replica folders, and loading them runs the CPU build of onnxruntime-genai that is installed,
which has no Ryzen AI execution provider. So a replica opened with ``provider=None`` under a
stand-in Ryzen AI runtime gets as far as the real runtime's refusal of that provider.
"""

from __future__ import annotations

import importlib.metadata as md
from collections.abc import Callable
from pathlib import Path

import pytest

from conftest import REPLICAS, TINY_LLAMA
from ryzenai_core import (
    ChatMessage,
    Engine,
    GenerationOptions,
    InvalidRequestError,
    ModelPackage,
    ModelPackageError,
    RuntimeNotAvailableError,
)
from ryzenai_core.runtime import (
    ENV_RELEASE,
    RuntimeInfo,
    env_release,
    release_for_oga_version,
    runtime_info,
)
from ryzenai_core.session import Session, SessionKey

LLAMA_NPU = REPLICAS / "Llama-3.2-1B_rai_1.8.0_npu_4K"
LLAMA_HYBRID = REPLICAS / "Llama-3.2-1B_rai_1.8.0_hybrid"
QWEN3_NPU = REPLICAS / "Qwen3-4B_rai_1.8.0_npu_4K"
QWEN25_CUSTOM_OPS = REPLICAS / "Qwen-2.5-1.5B-Instruct-onnx-ryzenai-npu"
PHI3_VITISAI = REPLICAS / "Phi-3-mini-4k-instruct-onnx-ryzenai-npu-1.4"

CPU_OGA = ("onnxruntime-genai", md.version("onnxruntime-genai"))
"""The CPU build that really is installed (and runs every model here)."""

Install = Callable[..., None]


@pytest.fixture
def renamed(copy_package: Callable[..., Path]) -> Callable[[Path], Path]:
    """A copy of a replica under a name that carries no release (as a Hugging Face snapshot has)."""

    return lambda src: copy_package(src, "snapshot-without-release")


def _limit_key_in(source: str) -> str:
    return source.split("max_prompt_length[")[1].split("]")[0].strip("'")


# ----------------------------------------------------------------------------- runtime_info
def test_the_real_environment_is_the_cpu_build():
    runtime_info.cache_clear()
    info = runtime_info()
    assert (info.distribution, info.version, info.ryzenai, info.release) == (*CPU_OGA, False, None)
    assert info.describe() == f"onnxruntime-genai {CPU_OGA[1]}, not a Ryzen AI build"


@pytest.mark.parametrize(
    ("dist", "version", "release"),
    [
        ("onnxruntime-genai-directml-ryzenai", "0.7.0.2", "1.5"),
        ("onnxruntime-genai-ryzenai", "0.9.2", "1.6"),
        ("onnxruntime-genai-ryzenai", "0.11.2", "1.7"),
        ("onnxruntime-genai-ryzenai", "0.14.0", "1.8"),
        ("onnxruntime-genai-directml-ryzenai", "0.14.1.dev3", "1.8"),
        ("onnxruntime-genai-ryzenai", "0.18.0", None),
        ("onnxruntime-genai-ryzenai", "nightly", None),
    ],
)
def test_ryzenai_build_maps_its_oga_version_to_a_release(installed, dist, version, release):
    installed(CPU_OGA, (dist, version))  # the Ryzen AI build is preferred over a CPU one
    info = runtime_info()
    assert info == RuntimeInfo(dist, version, True, release)
    assert info.installed
    assert info.describe() == f"{dist} {version}, Ryzen AI build (release {release or 'unknown'})"


def test_cpu_build_of_a_ryzenai_version_is_not_ryzenai(installed):
    installed(("onnxruntime-genai", "0.14.0"))
    assert runtime_info() == RuntimeInfo("onnxruntime-genai", "0.14.0", False, None)


def test_build_under_an_unusual_name_is_found_by_scanning(installed):
    installed(("numpy", "2.0.0"), ("onnxruntime", "1.22.0"), ("onnxruntime-genai-npu-ryzenai", "0.11.2"))
    assert runtime_info() == RuntimeInfo("onnxruntime-genai-npu-ryzenai", "0.11.2", True, "1.7")


def test_unusual_cpu_build_and_a_nameless_distribution(installed):
    installed((None, "1.0"), ("onnxruntime-genai-rocm", "0.14.0"))
    assert runtime_info() == RuntimeInfo("onnxruntime-genai-rocm", "0.14.0", False, None)


def test_no_runtime_installed(installed):
    installed(("numpy", "2.0.0"))
    info = runtime_info()
    assert info == RuntimeInfo(None, None, False, None)
    assert not info.installed and info.describe() == "no onnxruntime-genai installed"


def test_runtime_info_is_read_once(installed):
    installed(("onnxruntime-genai-ryzenai", "0.14.0"))
    assert runtime_info().release == "1.8"
    installed(("onnxruntime-genai-directml-ryzenai", "0.7.0"))  # clears the cache
    assert runtime_info().release == "1.5"


@pytest.mark.parametrize(
    ("version", "release"),
    [("0.7.0", "1.5"), ("0.9.2", "1.6"), ("0.11.2", "1.7"), ("0.14.0", "1.8"), ("0.8.0", None), ("1.14", None)],
)
def test_release_for_oga_version(version, release):
    assert release_for_oga_version(version) == release


@pytest.mark.parametrize(("value", "expected"), [("", None), ("   ", None), (" 1.7 ", "1.7"), ("1.8.0", "1.8.0")])
def test_env_release(monkeypatch, value, expected):
    monkeypatch.setenv(ENV_RELEASE, value)
    assert env_release() == expected


def test_env_release_rejects_what_is_not_a_release(monkeypatch):
    monkeypatch.setenv(ENV_RELEASE, "latest")
    with pytest.raises(InvalidRequestError, match=r"'latest' is not a version.*RYZENAI_VERSION"):
        env_release()


# ----------------------------------------------------------------------------- release -> prompt limit
@pytest.mark.parametrize(
    ("dist", "version", "release", "key", "limit"),
    [
        ("onnxruntime-genai-directml-ryzenai", "0.7.0", "1.5", "1.5.1", 2048),
        ("onnxruntime-genai-ryzenai", "0.9.2", "1.6", "1.6.0", 4096),
        ("onnxruntime-genai-ryzenai", "0.11.2", "1.7", "1.7.1", 4096),
        ("onnxruntime-genai-ryzenai", "0.14.0", "1.8", "1.7.1", 4096),
    ],
)
def test_installed_ryzenai_build_decides_the_prompt_limit(installed, renamed, dist, version, release, key, limit):
    installed(CPU_OGA, (dist, version))
    pkg = ModelPackage.open(renamed(LLAMA_NPU))
    assert (pkg.release, pkg.release_source) == (release, f"installed runtime {dist} {version}")
    budget = pkg.budget
    assert budget.prompt_limit == limit and budget.window == 4096
    assert budget.prompt_limit_source == f"rai_config.json max_prompt_length[{key!r}] for release {release}"


@pytest.mark.parametrize(
    "runtime",
    [CPU_OGA, ("onnxruntime-genai", "0.14.0"), ("onnxruntime-genai-ryzenai", "0.18.0"), ("numpy", "2.0.0")],
    ids=["cpu-build", "cpu-build-0.14", "unknown-ryzenai-version", "none"],
)
def test_without_a_known_release_the_smallest_limit_is_used(installed, renamed, runtime):
    installed(runtime)
    pkg = ModelPackage.open(renamed(LLAMA_NPU))
    assert (pkg.release, pkg.release_source) == (None, "unknown")
    assert pkg.budget.prompt_limit == 2048
    assert _limit_key_in(pkg.budget.prompt_limit_source) == "1.3.1"
    assert ENV_RELEASE in pkg.budget.prompt_limit_source


def test_runtime_older_than_every_key_gets_the_smallest(installed, renamed):
    installed(("onnxruntime-genai-directml-ryzenai", "0.7.0"))  # 1.5; Qwen3's keys: 1.5.1, 1.6.0, 1.7.1
    pkg = ModelPackage.open(renamed(QWEN3_NPU))
    assert pkg.release == "1.5"
    assert pkg.budget.prompt_limit == 2048 and _limit_key_in(pkg.budget.prompt_limit_source) == "1.5.1"


def test_environment_and_argument_override_the_installed_runtime(installed, renamed, monkeypatch):
    installed(("onnxruntime-genai-ryzenai", "0.14.0"))
    folder = renamed(LLAMA_NPU)
    pkg = ModelPackage.open(folder, release="1.6.0")
    assert (pkg.release, pkg.release_source, pkg.budget.prompt_limit) == ("1.6.0", "argument", 4096)
    assert _limit_key_in(pkg.budget.prompt_limit_source) == "1.6.0"
    monkeypatch.setenv(ENV_RELEASE, "1.5.0")
    pkg = ModelPackage.open(folder, release="1.6.0")
    assert (pkg.release, pkg.release_source) == ("1.5.0", f"environment variable {ENV_RELEASE}")
    assert pkg.budget.prompt_limit == 2048 and _limit_key_in(pkg.budget.prompt_limit_source) == "1.5.0"


def test_bad_release_argument_is_a_clear_error(installed, renamed):
    installed(("onnxruntime-genai-ryzenai", "0.14.0"))
    with pytest.raises(InvalidRequestError, match=r"'1.8.x' is not a version"):
        ModelPackage.open(renamed(LLAMA_NPU), release="1.8.x")


def test_folder_name_is_what_the_package_was_built_for(installed):
    installed(("onnxruntime-genai-ryzenai", "0.9.2"))
    pkg = ModelPackage.open(LLAMA_NPU)
    assert (pkg.release, pkg.release_source, pkg.built_for) == ("1.8.0", "folder name", "1.8.0")
    assert ModelPackage.open(REPLICAS / "SmolLM2-135M-Instruct-onnx-ryzenai-1.7-hybrid").built_for == "1.7"
    assert ModelPackage.open(QWEN25_CUSTOM_OPS).built_for is None


# ----------------------------------------------------------------------------- loading
def _load(path: Path, provider: str | None = None) -> Session:
    session = Session(SessionKey(str(path), provider))
    session.load()
    return session


@pytest.mark.parametrize("runtime", [CPU_OGA, ("numpy", "2.0.0")], ids=["cpu-build", "none"])
def test_ryzenai_package_on_another_runtime_is_refused_before_loading(installed, runtime):
    installed(runtime)
    found = f"onnxruntime-genai {CPU_OGA[1]}, not a Ryzen AI build" if runtime == CPU_OGA else "no onnxruntime-genai"
    with pytest.raises(RuntimeNotAvailableError) as err:
        _load(LLAMA_NPU)
    text = str(err.value)
    assert "Llama-3.2-1B_rai_1.8.0_npu_4K is a Ryzen AI package (full-fusion, RyzenAI provider, release 1.8.0)" in text
    assert f"found {found}" in text
    assert "conda activate ryzen-ai-1.8.0" in text and "provider='cpu'" in text
    assert err.value.__cause__ is None  # onnxruntime-genai was not asked


@pytest.mark.parametrize("replica", [LLAMA_NPU, LLAMA_HYBRID, QWEN3_NPU], ids=lambda p: p.name)
def test_ryzenai_runtime_keeps_the_packages_provider(installed, replica):
    """Past the check, the real CPU runtime is asked for the package's RyzenAI provider, and has none."""
    installed(CPU_OGA, ("onnxruntime-genai-ryzenai", "0.14.0"))
    session = Session(SessionKey(str(replica)))
    with pytest.raises(RuntimeNotAvailableError) as err:
        session.load()
    text = str(err.value)
    assert f"loading {replica.name} needs the Ryzen AI execution provider (RyzenAI)" in text
    assert "onnxruntime-genai-ryzenai 0.14.0, Ryzen AI build (release 1.8) does not have" in text
    assert "conda activate ryzen-ai-1.8.0" in text and "provider='cpu'" in text  # the fix
    cause = err.value.__cause__
    assert isinstance(cause, RuntimeError) and "RyzenAI execution provider" in str(cause)
    assert not session.loaded


def test_ryzenai_runtime_with_cpu_provider_runs_the_replica(installed):
    installed(CPU_OGA, ("onnxruntime-genai-ryzenai", "0.14.0"))
    engine = Engine(SessionKey(str(LLAMA_NPU), "cpu"), "inline")
    try:
        out = engine.generate([ChatMessage("user", "Hi")], GenerationOptions(max_new_tokens=3, temperature=0))
        assert out.usage.completion_tokens == 3
        assert engine.package.release == "1.8.0" and engine.budget.prompt_limit == 4096
    finally:
        engine.close()


def test_package_newer_than_the_ryzenai_runtime_is_refused(installed):
    installed(("onnxruntime-genai-ryzenai", "0.11.2"))
    with pytest.raises(RuntimeNotAvailableError) as err:
        _load(LLAMA_NPU)
    text = str(err.value)
    assert "built for Ryzen AI 1.8.0, a newer release than the installed runtime" in text
    assert "onnxruntime-genai-ryzenai 0.11.2, Ryzen AI build (release 1.7)" in text
    assert "conda activate ryzen-ai-1.8.0" in text and "package built for release 1.7" in text
    assert err.value.__cause__ is None


def test_package_newer_than_the_runtime_still_runs_on_the_cpu(installed):
    installed(("onnxruntime-genai-ryzenai", "0.11.2"), CPU_OGA)
    session = _load(LLAMA_NPU, "cpu")
    assert session.loaded and session.decode(session.encode("hello")) == "hello"


@pytest.mark.parametrize(
    ("replica", "version", "layout"),
    [(QWEN25_CUSTOM_OPS, "0.9.2", "1.3-1.6 custom-ops"), (PHI3_VITISAI, "0.14.0", "1.4 VitisAI")],
    ids=["custom-ops", "vitisai"],
)
def test_older_layouts_name_the_runtime_they_need(installed, replica, version, layout):
    installed(("onnxruntime-genai-ryzenai", version))
    with pytest.raises(RuntimeNotAvailableError) as err:
        _load(replica)
    release = release_for_oga_version(version)
    assert f"uses the Ryzen AI {layout} layout, which only the matching Ryzen AI runtime can load" in str(err.value)
    assert f"found onnxruntime-genai-ryzenai {version}, Ryzen AI build (release {release})" in str(err.value)
    assert isinstance(err.value.__cause__, RuntimeError)


def test_non_cpu_provider_is_appended_and_refused_by_the_cpu_build(installed):
    installed(CPU_OGA)
    with pytest.raises(RuntimeNotAvailableError) as err:
        _load(TINY_LLAMA, "cuda")
    assert f"provider='cuda' is not available in onnxruntime-genai {CPU_OGA[1]}" in str(err.value)
    assert "provider='cpu'" in str(err.value)
    assert "cuda" in str(err.value.__cause__).lower()


def test_other_load_failures_stay_package_errors(installed, copy_package):
    installed(("onnxruntime-genai-ryzenai", "0.14.0"), CPU_OGA)
    folder = copy_package(TINY_LLAMA)
    (folder / "model.onnx").write_bytes(b"not an onnx graph")
    with pytest.raises(ModelPackageError, match=r"onnxruntime-genai \(onnxruntime-genai-ryzenai 0.14.0, Ryzen AI"):
        _load(folder, "cpu")


def test_package_older_than_the_runtime_is_not_refused_up_front(installed):
    installed(("onnxruntime-genai-ryzenai", "0.14.0"))
    smol = REPLICAS / "SmolLM2-135M-Instruct-onnx-ryzenai-1.7-hybrid"
    with pytest.raises(RuntimeNotAvailableError, match=r"needs the Ryzen AI execution provider \(RyzenAI\)") as err:
        _load(smol)
    assert "Failed to register RyzenAI execution provider" in str(err.value.__cause__)
