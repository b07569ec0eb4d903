"""The code paths that only run under AMD's Ryzen AI build of onnxruntime-genai.

Only the installed distributions are stood in for: each test writes ``*.dist-info`` folders
(real package metadata) into a temporary directory and has :mod:`ryzenai_core.package.runtime` read
its distribution names and versions there. Everything else is real: the packages are the
replica folders, and loading them runs the CPU build of onnxruntime-genai that is installed,
which has no Ryzen AI execution provider. So a replica opened with ``provider=None`` under a
stand-in Ryzen AI runtime gets as far as the real runtime's refusal of that provider.
"""

from __future__ import annotations

import importlib.metadata as md
import json
import logging
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

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
from ryzenai_core.generation.loader import SessionKey
from ryzenai_core.generation.session import Session
from ryzenai_core.package import ep as ep_module
from ryzenai_core.package import runtime as runtime_module
from ryzenai_core.package.ep import ENV_EP_PATH, find_ryzenai_ep, prepare_ryzenai_runtime
from ryzenai_core.package.runtime import ENV_RELEASE, RuntimeInfo, env_release, release_for_oga_version, runtime_info

LLAMA_NPU = REPLICAS / "Llama-3.2-1B_rai_1.8.0_npu_4K"
NODE = "modellayers.0input_layernormMLADFRMSNORM"
EP_WINDOWS, EP_LINUX = "onnxruntime_providers_ryzenai.dll", "libonnxruntime_providers_ryzenai.so"
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
    assert info.describe() == f"onnxruntime-genai {CPU_OGA[1]}, a public build"


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
    assert info.describe() == f"{dist} {version}, AMD's Ryzen AI build (release {release or 'unknown'})"


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
    assert budget.prompt_limit == min(limit, 4095) and budget.window == 4096  # one token left for the answer
    source = f"rai_config.json max_prompt_length[{key!r}] for release {release}"
    assert budget.prompt_limit_source == (source if limit < 4096 else f"{source}, less the one token an answer needs")


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
    assert (pkg.release, pkg.release_source, pkg.budget.prompt_limit) == ("1.6.0", "argument", 4095)
    assert _limit_key_in(pkg.budget.prompt_limit_source) == "1.6.0"
    monkeypatch.setenv(ENV_RELEASE, "1.5.0")
    pkg = ModelPackage.open(folder, release="1.6.0")
    assert (pkg.release, pkg.release_source) == ("1.5.0", f"environment variable {ENV_RELEASE}")
    assert pkg.budget.prompt_limit == 2048 and _limit_key_in(pkg.budget.prompt_limit_source) == "1.5.0"


def test_bad_release_argument_is_a_clear_error(installed, renamed):
    installed(("onnxruntime-genai-ryzenai", "0.14.0"))
    with pytest.raises(InvalidRequestError, match=r"'1.8.x' is not a version"):
        ModelPackage.open(renamed(LLAMA_NPU), release="1.8.x")


def test_the_installed_runtime_decides_the_release_before_the_folder_name(installed, capsys):
    """The runtime that runs the package sets its prompt limit; the name only says what it was built for."""
    from ryzenai_cli.main import main

    installed(("onnxruntime-genai-ryzenai", "0.9.2"))
    pkg = ModelPackage.open(LLAMA_NPU)
    assert (pkg.release, pkg.built_for) == ("1.6", "1.8.0")
    assert pkg.release_source == "installed runtime onnxruntime-genai-ryzenai 0.9.2"
    assert _limit_key_in(pkg.budget.prompt_limit_source) == "1.6.0"
    assert ModelPackage.open(REPLICAS / "SmolLM2-135M-Instruct-onnx-ryzenai-1.7-hybrid").built_for == "1.7"
    assert ModelPackage.open(QWEN25_CUSTOM_OPS).built_for is None
    assert main(["info", str(LLAMA_NPU)]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("Ryzen AI release"))
    assert row.endswith("1.6 (from installed runtime onnxruntime-genai-ryzenai 0.9.2); the package was built for 1.8.0")


@pytest.mark.parametrize(
    "runtime", [CPU_OGA, ("onnxruntime-genai-ryzenai", "0.18.0")], ids=["cpu-build", "unknown-ryzenai-version"]
)
def test_the_folder_name_decides_only_when_the_runtime_release_is_unknown(installed, runtime):
    installed(runtime)
    pkg = ModelPackage.open(QWEN3_NPU)
    assert (pkg.release, pkg.built_for) == ("1.8.0", "1.8.0")
    assert pkg.release_source == "folder name, as the installed runtime's release is unknown"
    assert pkg.describe()["release_source"] == pkg.release_source


# ----------------------------------------------------------------------------- loading
def _load(path: Path, provider: str | None = None) -> Session:
    session = Session(SessionKey(str(path), provider))
    session.load()
    return session


@pytest.mark.parametrize("runtime", [CPU_OGA, ("numpy", "2.0.0")], ids=["cpu-build", "none"])
def test_ryzenai_package_on_another_runtime_is_refused_before_loading(installed, runtime):
    installed(runtime)
    found = f"onnxruntime-genai {CPU_OGA[1]}, a public build" if runtime == CPU_OGA else "no onnxruntime-genai"
    with pytest.raises(RuntimeNotAvailableError) as err:
        _load(LLAMA_NPU)
    text = str(err.value)
    assert "Llama-3.2-1B_rai_1.8.0_npu_4K is a Ryzen AI package (full-fusion, RyzenAI provider, release 1.8.0)" in text
    assert f"found {found}" in text
    assert "source <venv>/bin/activate" in text and "<venv>/deployment/lib" in text and "provider='cpu'" in text
    assert "conda" not in text  # AMD's Linux installer makes a virtual environment
    assert err.value.__cause__ is None  # onnxruntime-genai was not asked


@pytest.mark.parametrize("replica", [LLAMA_NPU, LLAMA_HYBRID, QWEN3_NPU], ids=lambda p: p.name)
def test_an_amd_build_without_its_ep_library_is_refused_before_loading(installed, replica):
    """AMD's name on the distribution does not make a runtime that can run the NPU: its EP library does."""
    installed(CPU_OGA, ("onnxruntime-genai-ryzenai", "0.14.0"))
    session = Session(SessionKey(str(replica)))
    with pytest.raises(RuntimeNotAvailableError) as err:
        session.load()
    text = str(err.value)
    assert "needs onnxruntime-genai with AMD's Ryzen AI EP library" in text
    assert f"the Ryzen AI EP library cannot be found: {EP_LINUX} is not found: {ENV_EP_PATH} is unset" in text
    assert "<venv>/deployment/lib" in text
    assert err.value.__cause__ is None and not session.loaded  # onnxruntime-genai was not asked


@pytest.mark.parametrize("replica", [LLAMA_NPU, LLAMA_HYBRID], ids=lambda p: p.name)
def test_a_public_build_with_an_ep_library_runs_the_package_on_the_ryzenai_provider(monkeypatch, stand_in_eps, replica):
    """The public CPU wheel has AMD's RyzenAI code: given an EP library that loads, it goes on to the NPU.

    The stand-in library registers and finds no NPU, as AMD's does on a PC without one: the real
    runtime's own text comes back, explained.
    """
    monkeypatch.setenv(ENV_EP_PATH, str(stand_in_eps["no_device"]))
    session = Session(SessionKey(str(replica)))
    with pytest.raises(RuntimeNotAvailableError) as err:
        session.load()
    assert f"loading {replica.name} on the NPU failed: the Ryzen AI execution provider loaded but sees no NPU" in str(
        err.value
    )
    assert str(err.value.__cause__) == "No RyzenAI devices detected"  # the runtime's own words


@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        (
            "other_release",
            "loads but has no CreateEpFactories entry point: it is an EP library of another Ryzen AI release",
        ),
        ("missing_dependency", "is found but does not load: libryzenai_standin_dep.so: cannot open shared object file"),
        ("not_a_library", "is found but does not load: "),
    ],
)
def test_an_ep_library_that_does_not_load_is_named_before_any_model_load(monkeypatch, stand_in_eps, kind, expected):
    library = stand_in_eps[kind]
    monkeypatch.setenv(ENV_EP_PATH, str(library))
    runtime = ep_module.npu_runtime()
    assert not runtime.usable and runtime.load is not None and not runtime.load.ok
    assert f"the Ryzen AI EP library {library} {expected}" in str(runtime.problem)
    with pytest.raises(RuntimeNotAvailableError) as err:
        _load(LLAMA_NPU)
    assert expected in str(err.value) and err.value.__cause__ is None  # refused before the runtime was asked


def test_the_runtime_text_for_an_ep_library_of_another_release_has_its_own_explanation(stand_in_eps):
    text = (
        "Failed to register RyzenAI execution provider library: Failed to get symbol CreateEpFactories with error: "
        f"{stand_in_eps['other_release']}: undefined symbol: CreateEpFactories"
    )
    cause = ep_module.explain_ryzenai_failure(
        text, find_ryzenai_ep(environ={ENV_EP_PATH: str(stand_in_eps["other_release"])})
    )
    assert (
        cause is not None
        and "no CreateEpFactories entry point: it is an EP library of another Ryzen AI release" in cause
    )


def test_a_library_in_the_linux_installers_folder_is_passed_to_the_worker(tmp_path, stand_in_eps):
    """AMD's Linux installer puts the library in <venv>/deployment/lib, where onnxruntime-genai does not look."""
    lib = tmp_path / "venv" / "deployment" / "lib"
    lib.mkdir(parents=True)
    shutil.copy2(stand_in_eps["no_device"], lib / EP_LINUX)
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    environ = {"PATH": "/usr/bin", "LD_LIBRARY_PATH": "/opt/other"}
    ep = find_ryzenai_ep(
        windows=False, environ=environ, cwd=cwd, prefix=tmp_path / "venv", genai_dir=None, ort_dir=None
    )
    assert ep.found and not ep.runtime_finds and ep.elsewhere == lib / EP_LINUX
    assert ep.source == "in this environment's deployment/lib"
    assert f"ryzenai-llm passes {ENV_EP_PATH}={lib / EP_LINUX} to its workers" in ep.describe()
    env = ep_module.worker_environment(environ, ep=ep, windows=False)
    assert env is not None and env[ENV_EP_PATH] == str(lib / EP_LINUX)
    assert env["LD_LIBRARY_PATH"] == f"{lib}{os.pathsep}/opt/other" and environ["LD_LIBRARY_PATH"] == "/opt/other"
    assert ep_module.worker_environment({**environ, **env}, ep=ep, windows=False) is None  # nothing left to add


def test_a_worker_starts_with_the_library_the_parent_found(monkeypatch, tmp_path, stand_in_eps):
    """The worker's environment names the library: its runtime finds it whatever its working folder."""
    from ryzenai_core import workers
    from ryzenai_core.engine.client import WorkerClient

    cwd = tmp_path / "cwd"
    cwd.mkdir()
    shutil.copy2(stand_in_eps["no_device"], cwd / EP_LINUX)
    monkeypatch.chdir(cwd)  # found in the working folder, as onnxruntime-genai on Linux finds it
    monkeypatch.setenv("LD_LIBRARY_PATH", "/opt/other")
    started: dict = {}
    monkeypatch.setattr(workers, "popen_worker", lambda module, **kwargs: started.update(kwargs, module=module))
    WorkerClient(SessionKey(str(LLAMA_NPU))).spawn()
    env = started["env"]
    assert started["module"] == WorkerClient.module
    assert env[ENV_EP_PATH] == str(cwd / EP_LINUX) and env["LD_LIBRARY_PATH"] == f"{cwd}{os.pathsep}/opt/other"
    assert os.environ.get(ENV_EP_PATH) is None  # the caller's own environment is left as it was


def test_ryzenai_runtime_with_cpu_provider_runs_the_replica(installed):
    installed(CPU_OGA, ("onnxruntime-genai-ryzenai", "0.14.0"))
    engine = Engine(SessionKey(str(LLAMA_NPU), "cpu"), "inline")
    try:
        out = engine.generate([ChatMessage("user", "Hi")], GenerationOptions(max_new_tokens=3, temperature=0))
        assert out.usage.completion_tokens == 3
        assert engine.package.release == "1.8" and engine.budget.prompt_limit == 4095
    finally:
        engine.close()


def test_package_newer_than_the_ryzenai_runtime_is_refused(installed):
    installed(("onnxruntime-genai-ryzenai", "0.11.2"))
    with pytest.raises(RuntimeNotAvailableError) as err:
        _load(LLAMA_NPU)
    text = str(err.value)
    assert "was built for Ryzen AI 1.8.0, a newer release than the runtime that would run it (Ryzen AI 1.7: " in text
    assert "onnxruntime-genai-ryzenai 0.11.2, Ryzen AI build (Ryzen AI release 1.7)" in text
    assert "Use the package built for Ryzen AI 1.7" in text and "run in the Ryzen AI 1.8.0 environment" in text
    assert f"set {ENV_RELEASE}=1.8.0" in text
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
    assert f"found onnxruntime-genai-ryzenai {version}, AMD's Ryzen AI build (release {release})" in str(err.value)
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
    with pytest.raises(
        ModelPackageError, match=r"onnxruntime-genai \(onnxruntime-genai-ryzenai 0.14.0, AMD's Ryzen AI"
    ):
        _load(folder, "cpu")


def test_package_older_than_the_runtime_is_refused_with_both_releases(installed, monkeypatch, stand_in_eps):
    """AMD: models from earlier releases are not compatible; a 1.7 package on a 1.8 runtime is refused at load."""
    installed(("onnxruntime-genai-ryzenai", "0.14.0"))
    monkeypatch.setenv(ENV_EP_PATH, str(stand_in_eps["no_device"]))
    smol = REPLICAS / "SmolLM2-135M-Instruct-onnx-ryzenai-1.7-hybrid"
    with pytest.raises(RuntimeNotAvailableError) as err:
        _load(smol)
    text = str(err.value)
    assert "SmolLM2-135M-Instruct-onnx-ryzenai-1.7-hybrid was built for Ryzen AI 1.7, an older release" in text
    assert "(Ryzen AI 1.8: onnxruntime-genai-ryzenai 0.14.0 with the Ryzen AI EP library" in text
    assert "Use the package built for Ryzen AI 1.8" in text
    assert err.value.__cause__ is None  # refused before the runtime was asked
    monkeypatch.setenv(ENV_RELEASE, "1.7")  # the user says the runtime is 1.7: the load goes on to the runtime
    with pytest.raises(RuntimeNotAvailableError, match="sees no NPU device"):
        _load(smol)


def test_a_package_of_the_runtimes_release_goes_on_to_the_runtime(installed, monkeypatch, stand_in_eps):
    installed(("onnxruntime-genai-ryzenai", "0.14.0"))
    monkeypatch.setenv(ENV_EP_PATH, str(stand_in_eps["no_device"]))
    with pytest.raises(RuntimeNotAvailableError, match="sees no NPU device"):
        _load(LLAMA_NPU)


# ----------------------------------------------------------------------------- the EP library
@pytest.fixture
def places(tmp_path: Path) -> dict[str, Path]:
    """A folder for each place onnxruntime-genai looks in, in its order."""
    folders = {name: tmp_path / name for name in ("genai", "ort", "exe", "cwd")}
    for folder in folders.values():
        folder.mkdir()
    return folders


def _search(places: dict[str, Path], *, windows: bool, environ: dict[str, str] | None = None):
    return find_ryzenai_ep(
        windows=windows,
        environ=environ or {},
        genai_dir=places["genai"],
        ort_dir=places["ort"],
        exe_dir=places["exe"],
        cwd=places["cwd"],
        prefix=places["cwd"].parent / "venv",
    )


@pytest.mark.parametrize(
    ("first", "source"),
    [
        ("genai", "next to onnxruntime-genai"),
        ("ort", "next to onnxruntime"),
        ("exe", "next to the executable"),
        ("cwd", "in the working folder"),
    ],
)
def test_windows_looks_next_to_genai_onnxruntime_the_executable_then_the_working_folder(places, first, source):
    order = list(places)
    for name in order[order.index(first) :]:  # the library there and in every later place
        (places[name] / EP_WINDOWS).write_bytes(b"MZ")
    ep = _search(places, windows=True)
    assert (ep.path, ep.source, ep.problem) == (places[first] / EP_WINDOWS, source, None)
    assert [p for _, p in ep.searched][: order.index(first) + 1] == [
        places[n] / EP_WINDOWS for n in order[: order.index(first) + 1]
    ]
    assert ep.missing_dlls == ()  # Lemonade's DLL check is Ryzen AI 1.6's
    with_16 = find_ryzenai_ep(windows=True, environ={}, genai_dir=places["genai"], cwd=places["cwd"], dll_check=True)
    assert with_16.missing_dlls == ("libutf8_validity.dll", "abseil_dll.dll")


def test_linux_looks_only_at_the_variable_and_the_working_folder(places):
    ep = _search(places, windows=False)
    assert not ep.found and [p for _, p in ep.searched] == [places["cwd"] / EP_LINUX]
    assert (
        f"{ENV_EP_PATH} is unset, and on Linux onnxruntime-genai looks only there and in the working folder"
        in ep.problem
    )
    assert "AMD's Linux installer puts it" in ep.problem and "source <venv>/bin/activate" in ep.problem
    (places["genai"] / EP_LINUX).write_bytes(b"\x7fELF")  # where the Ryzen AI wheel may keep it
    beside = _search(places, windows=False)
    assert beside.found and not beside.runtime_finds and beside.elsewhere == places["genai"] / EP_LINUX
    assert [p for _, p in beside.searched] == [places["cwd"] / EP_LINUX]  # the runtime's own search is not widened
    (places["cwd"] / EP_LINUX).write_bytes(b"\x7fELF")
    assert _search(places, windows=False).source == "in the working folder"


@pytest.mark.parametrize("windows", [True, False], ids=["windows", "linux"])
def test_the_variable_names_the_library_and_is_not_looked_past(places, tmp_path, windows):
    name = EP_WINDOWS if windows else EP_LINUX
    (places["genai"] / name).write_bytes(b"x")
    (places["cwd"] / name).write_bytes(b"x")
    named = tmp_path / "ryzen_ai" / name
    named.parent.mkdir()
    named.write_bytes(b"x")
    ep = _search(places, windows=windows, environ={ENV_EP_PATH: str(named)})
    assert (ep.path, ep.source) == (named, ENV_EP_PATH)
    missing = _search(places, windows=windows, environ={ENV_EP_PATH: str(tmp_path / "gone" / name)})
    assert not missing.found  # the runtime uses the named path as it is: a library elsewhere does not help
    assert (
        missing.problem
        == f"{ENV_EP_PATH} is {tmp_path / 'gone' / name}, which does not exist; set it to the full path of {name}"
    )
    folder = _search(places, windows=windows, environ={ENV_EP_PATH: str(named.parent)})
    assert f"a folder; it must name the library file itself ({named} is there: set it to that)" in folder.problem


def test_windows_puts_the_genai_folder_on_the_dll_search_path_once(monkeypatch):
    added: list[str] = []
    monkeypatch.setattr(os, "add_dll_directory", added.append, raising=False)
    monkeypatch.setattr(ep_module, "_DLL_DIRECTORIES", {})
    environ = {"PATH": r"C:\Windows\system32"}
    genai = str(Path(md.distribution("onnxruntime-genai").locate_file("onnxruntime_genai")))
    for _ in range(2):
        ep = prepare_ryzenai_runtime(windows=True, environ=environ)
    assert added == [genai]
    assert environ["PATH"] == genai + os.pathsep + r"C:\Windows\system32"
    assert ep.searched[0] == ("next to onnxruntime-genai", Path(genai) / EP_WINDOWS)
    assert ep.missing_dlls == ()  # checked with Ryzen AI 1.6 only


def test_linux_changes_no_search_path(monkeypatch):
    monkeypatch.setattr(os, "add_dll_directory", lambda p: pytest.fail("no DLL directories on Linux"), raising=False)
    environ = {"PATH": "/usr/bin"}
    ep = prepare_ryzenai_runtime(windows=False, environ=environ)
    assert environ == {"PATH": "/usr/bin"} and ep.filename == EP_LINUX


class StandInRuntime:
    """An onnxruntime_genai whose model load fails with the text AMD's build gives on a laptop."""

    def __init__(self, text: str) -> None:
        self.text = text

    def Config(self, path: str) -> SimpleNamespace:  # noqa: N802 - the runtime's name
        return SimpleNamespace(clear_providers=lambda: None, append_provider=lambda name: None, overlay=lambda j: None)

    def Model(self, config: object) -> None:  # noqa: N802
        raise RuntimeError(self.text)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "No RyzenAI devices detected",
            ["sees no NPU device", "NPU Compute Accelerator Device", "xrt-smi examine", "ryzenai-llm doctor"],
        ),
        (
            'LoadLibrary failed with error 126 "" when trying to load "C:\\ryzen\\onnxruntime_providers_ryzenai.dll"',
            [
                "was found but could not be loaded (Windows error 126: the DLL or one it depends on was not found)",
                "source <venv>/bin/activate",
            ],
        ),
        (
            "Unknown provider name 'RyzenAI'",
            ["has no RyzenAI execution provider (a public build older than 0.12", "source <venv>/bin/activate"],
        ),
    ],
    ids=["no-device", "dll-126", "no-ep-in-build"],
)
def test_runtime_failures_name_their_cause(installed, monkeypatch, stand_in_eps, text, expected):
    installed(("onnxruntime-genai-ryzenai", "0.14.0"))
    monkeypatch.setenv(ENV_EP_PATH, str(stand_in_eps["no_device"]))  # found and loads: what fails is the runtime's
    monkeypatch.setattr(runtime_module, "_oga", StandInRuntime(text))
    with pytest.raises(RuntimeNotAvailableError) as err:
        _load(LLAMA_NPU)
    message = str(err.value)
    assert message.startswith("loading Llama-3.2-1B_rai_1.8.0_npu_4K on the NPU failed: ")
    assert all(part in message for part in expected), message
    assert "does not have" not in message  # the old answer to all three: "the build lacks the provider"
    assert str(err.value.__cause__) == text


def test_the_worker_looks_for_the_ep_library_where_it_loads_the_model(tmp_path, monkeypatch):
    """A stand-in Ryzen AI build for the worker process too: its dist-info on the worker's path."""
    site = tmp_path / "site"
    info = site / "onnxruntime_genai_ryzenai-0.14.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: onnxruntime-genai-ryzenai\nVersion: 0.14.0\n")
    nowhere = tmp_path / "nowhere" / EP_LINUX
    monkeypatch.setenv("PYTHONPATH", str(site))
    monkeypatch.setenv(ENV_EP_PATH, str(nowhere))
    engine = Engine(SessionKey(str(LLAMA_NPU)), "process")
    try:
        with pytest.raises(RuntimeNotAvailableError) as err:
            engine.load()
    finally:
        engine.close()
    assert f"the Ryzen AI EP library cannot be found: {ENV_EP_PATH} is {nowhere}, which does not exist" in str(
        err.value
    )


# ----------------------------------------------------------------------------- partial downloads
def test_a_package_without_cache_is_refused_before_the_native_loader(
    installed, copy_package, monkeypatch, stand_in_eps
):
    installed(("onnxruntime-genai-ryzenai", "0.14.0"))
    monkeypatch.setenv(ENV_EP_PATH, str(stand_in_eps["no_device"]))
    folder = copy_package(LLAMA_NPU)
    shutil.rmtree(folder / "cache")
    assert ModelPackage.open(folder).missing_files == ("cache/",)
    with pytest.raises(ModelPackageError) as err:
        _load(folder)
    assert f"Llama-3.2-1B_rai_1.8.0_npu_4K is incomplete: cache/ is missing from {folder}" in str(err.value)
    assert err.value.__cause__ is None  # onnxruntime-genai was not asked
    assert _load(folder, "cpu").loaded  # the CPU runs the plain graph without it


def test_a_missing_state_file_is_named_and_compiled_at_load(installed, copy_package, caplog, monkeypatch, stand_in_eps):
    installed(("onnxruntime-genai-ryzenai", "0.14.0"))
    monkeypatch.setenv(ENV_EP_PATH, str(stand_in_eps["no_device"]))
    folder = copy_package(LLAMA_NPU)
    state = f"dd_metastate_Llm_Prefill_{NODE}.state"
    (folder / state).unlink()
    assert ModelPackage.open(folder).missing_files == (state,)
    with caplog.at_level(logging.WARNING, logger="ryzenai_core"), pytest.raises(RuntimeNotAvailableError):
        _load(folder)  # the load goes on to the runtime (whose EP library finds no NPU here)
    assert any(
        f"{state} is missing" in r.getMessage() and "compiles it at load time" in r.getMessage() for r in caplog.records
    )
    monkeypatch.setattr(os, "access", lambda path, mode: False)  # a read-only folder
    with pytest.raises(ModelPackageError, match=rf"{state} is missing from .*, which is read-only"):
        _load(folder)


# ----------------------------------------------------------------------------- a runtime without guidance
def test_a_runtime_that_ignores_guidance_refuses_constrained_calls(monkeypatch):
    """A build without guidance keeps set_guidance and ignores it: structured output would run unconstrained."""
    import onnxruntime_genai as og

    from ryzenai_cli import doctor_run
    from ryzenai_cli.doctor_report import Report
    from ryzenai_core import GuidanceUnsupportedError

    monkeypatch.setattr(og.GeneratorParams, "set_guidance", lambda self, *args: None)  # a no-op, as such a build's
    engine = Engine(SessionKey(str(TINY_LLAMA)), "inline")
    tool = {"type": "function", "function": {"name": "lookup", "parameters": {"type": "object", "properties": {}}}}
    hi = [ChatMessage("user", "Hi")]
    try:
        with pytest.raises(
            GuidanceUnsupportedError, match=r"ignores it \(a probe constrained to 'QQQ' wrote something"
        ):
            engine.generate(hi, GenerationOptions(max_new_tokens=64, response_format={"type": "json_object"}))
        with pytest.raises(GuidanceUnsupportedError, match="a forced tool call"):
            engine.generate(hi, GenerationOptions(max_new_tokens=64, tools=(tool,), tool_choice="lookup"))
        assert engine.generate(hi, GenerationOptions(max_new_tokens=3, temperature=0)).usage.completion_tokens == 3
        report = Report()
        doctor_run.check_guidance(report, engine)
        assert (
            report.checks[-1].status == "fail"
            and "structured output and forced tool calls are refused" in report.checks[-1].detail
        )
    finally:
        engine.close()


def test_a_runtime_with_guidance_passes_its_probe():
    engine = Engine(SessionKey(str(TINY_LLAMA)), "inline")
    try:
        out = engine.generate(
            [ChatMessage("user", "Hi")],
            GenerationOptions(max_new_tokens=4, guidance={"type": "regex", "data": "yes|no"}),
        )
        assert out.text in ("yes", "no")
    finally:
        engine.close()


# ----------------------------------------------------------------------------- packages of other releases
@pytest.mark.parametrize(
    ("name", "which"),
    [("Llama-3.2-1B_rai_1.7.1_npu_4K", "an older"), ("Llama-3.2-1B_rai_1.9.0_npu", "a newer")],
)
def test_a_package_of_another_release_is_refused_at_load_with_both(
    installed, monkeypatch, stand_in_eps, copy_package, name, which
):
    installed(("onnxruntime-genai-ryzenai", "0.14.0"))  # Ryzen AI 1.8, with its EP library
    monkeypatch.setenv(ENV_EP_PATH, str(stand_in_eps["no_device"]))
    folder = copy_package(LLAMA_NPU, name)
    built = name.split("_rai_")[1].split("_")[0]
    with pytest.raises(RuntimeNotAvailableError) as err:
        _load(folder)
    text = str(err.value)
    assert (
        f"{name} was built for Ryzen AI {built}, {which} release than the runtime that would run it (Ryzen AI 1.8"
        in text
    )
    assert "Use the package built for Ryzen AI 1.8" in text and f"{ENV_RELEASE}={built}" in text
    assert err.value.__cause__ is None


def test_a_runtime_of_an_unknown_release_checks_no_release_and_says_how_to_name_it(
    installed, monkeypatch, stand_in_eps, copy_package, capsys
):
    """An AMD build newer than this plugin knows (0.18): its release is unknown; RYZENAI_VERSION names it."""
    from ryzenai_cli.main import main

    installed(("onnxruntime-genai-ryzenai", "0.18.0"))
    monkeypatch.setenv(ENV_EP_PATH, str(stand_in_eps["no_device"]))
    folder = copy_package(LLAMA_NPU, "Llama-3.2-1B_rai_1.9.0_npu")
    with pytest.raises(RuntimeNotAvailableError, match="sees no NPU device"):  # not refused: the runtime is asked
        _load(folder)
    main(["doctor", "--json"])
    found = {c["name"]: (c["status"], c["detail"]) for c in json.loads(capsys.readouterr().out)["checks"]}
    assert (
        found["Ryzen AI release"][0] == "warn" and f"set {ENV_RELEASE} to the release" in found["Ryzen AI release"][1]
    )
    monkeypatch.setenv(ENV_RELEASE, "1.8")
    with pytest.raises(
        RuntimeNotAvailableError,
        match=r"built for Ryzen AI 1.9.0, a newer release .*\(Ryzen AI 1.8: RYZENAI_VERSION=1.8\)",
    ):
        _load(folder)
