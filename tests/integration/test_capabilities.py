"""What a package can do, read from its files: the core's Capabilities and LangChain's profile, on a plain
fixture model, NPU replicas and the vision fixture (LlamaIndex's metadata from the same facts: in
tests/unit/test_ryzenai_llm.py, on the fake engine)."""

from __future__ import annotations

import copy
import pickle
from pathlib import Path

import pytest
from langchain_core.language_models.model_profile import ModelProfile
from langchain_core.load import dumpd
from typing_extensions import get_type_hints

from conftest import MODELS, REPLICAS, TINY_GEMMA3, TINY_LLAMA, TINY_QWEN3
from langchain_ryzenai import ChatRyzenAI
from ryzenai_core import ModelPackage, RuntimeNotAvailableError
from ryzenai_core.package.capabilities import load_problem, read_capabilities
from ryzenai_core.package.runtime import ENV_RELEASE

VISION = MODELS / "tiny-gemma3-vision"
LLAMA_NPU = REPLICAS / "Llama-3.2-1B_rai_1.8.0_npu_4K"
QWEN3_NPU = REPLICAS / "Qwen3-4B_rai_1.8.0_npu_4K"
GEMMA3_NPU = REPLICAS / "Gemma-3-4b_rai_1.8.0_npu_16K"


# ---------------------------------------------------------------------- the core's facts
def test_plain_fixture_model():
    caps = read_capabilities(TINY_QWEN3)
    assert caps is not None
    assert (caps.name, caps.window, caps.prompt_limit, caps.max_output_tokens) == ("tiny-qwen3", 4096, 4095, 4095)
    assert caps.output_budget == ModelPackage.open(TINY_QWEN3).budget.bounded_output_tokens
    assert caps.tools and caps.reasoning and caps.structured_output and not caps.images


def test_npu_replica_prompt_limit_follows_the_release():
    """rai_config.json of the Llama replica: 2048 up to 1.5.1, 4096 from 1.6.0 (capped at window - 1)."""
    assert read_capabilities(LLAMA_NPU).prompt_limit == 4095  # release 1.8.0, from the folder name
    old = read_capabilities(LLAMA_NPU, release="1.5.0")
    assert old.prompt_limit == 2048 and "1.5.0" in old.prompt_limit_source
    assert old.window == 4096 and not old.reasoning and old.tools


@pytest.mark.parametrize(
    ("dist", "version", "limit"),
    [
        ("onnxruntime-genai-directml-ryzenai", "0.7.0.2", 2048),  # Ryzen AI 1.5
        ("onnxruntime-genai-ryzenai", "0.11.2", 4095),  # Ryzen AI 1.7
        ("onnxruntime-genai", "0.18.0", 2048),  # not Ryzen AI: the smallest limit, never over-promise
    ],
)
def test_the_installed_runtime_decides_the_limit_of_a_package_without_a_release(
    installed, copy_package, dist, version, limit
):
    snapshot = copy_package(LLAMA_NPU, "snapshot-without-release")
    installed((dist, version))
    assert read_capabilities(snapshot).prompt_limit == limit
    assert ChatRyzenAI(model=str(snapshot)).profile["max_input_tokens"] == limit


def test_release_from_the_environment_is_part_of_the_cache_key(monkeypatch):
    assert read_capabilities(LLAMA_NPU).prompt_limit == 4095
    monkeypatch.setenv(ENV_RELEASE, "1.4.0")
    assert read_capabilities(LLAMA_NPU).prompt_limit == 2048


def test_vision_fixture_takes_images():
    caps = read_capabilities(VISION)
    assert caps.images and caps.image_tokens == 256
    assert not caps.tools and not caps.reasoning  # Gemma 3's template has neither
    npu = read_capabilities(GEMMA3_NPU)
    assert npu.images and npu.prompt_limit == 4095  # search.max_length 4096, as the real package


def test_a_template_override_changes_what_the_package_can_do():
    assert read_capabilities(TINY_GEMMA3).tools is False
    qwen_template = (TINY_QWEN3 / "chat_template.jinja").read_text(encoding="utf-8")
    caps = read_capabilities(TINY_GEMMA3, chat_template=qwen_template)
    assert caps.tools and caps.reasoning


@pytest.mark.parametrize(
    "model",
    ["amd/Not-Downloaded_rai_1.8.0_npu_4K", "no-such-embedded-model", "/no/such/folder"],
)
def test_unreadable_models_have_no_capabilities_and_no_error(model):
    assert read_capabilities(model) is None


def test_a_config_that_is_an_lfs_pointer_gives_none(copy_package):
    folder = copy_package(TINY_LLAMA)
    (folder / "genai_config.json").write_text(
        "version https://git-lfs.github.com/spec/v1\noid sha256:" + "0" * 64 + "\nsize 1234\n", encoding="utf-8"
    )
    assert read_capabilities(folder) is None


def test_an_edited_config_is_read_again(copy_package):
    folder = copy_package(TINY_LLAMA)
    assert read_capabilities(folder).window == 4096
    config = folder / "genai_config.json"
    config.write_text(config.read_text(encoding="utf-8").replace('"context_length": 4096', '"context_length": 2048'))
    assert read_capabilities(folder).window == 2048


def test_load_problem_on_this_machine():
    assert load_problem(ModelPackage.open(TINY_LLAMA)) is None
    problem = load_problem(ModelPackage.open(LLAMA_NPU))
    assert isinstance(problem, RuntimeNotAvailableError) and "AMD's Ryzen AI EP library" in str(problem)
    assert load_problem(ModelPackage.open(LLAMA_NPU), provider="cpu") is None


def test_load_problem_names_lfs_pointers(installed, monkeypatch, stand_in_eps):
    installed(("onnxruntime-genai-ryzenai", "0.14.0"))  # Ryzen AI 1.8
    monkeypatch.setenv("RYZENAI_EP_PATH", str(stand_in_eps["no_device"]))  # with its EP library
    assert load_problem(ModelPackage.open(LLAMA_NPU)) is None
    problem = load_problem(ModelPackage.open(REPLICAS / "Llama-3.2-1B_rai_1.8.0_npu_4K-lfs-pointers"))
    assert "Git LFS pointer" in str(problem) and "git lfs pull" in str(problem)


def test_load_problem_names_a_package_newer_than_the_runtime(installed):
    installed(("onnxruntime-genai-ryzenai", "0.11.2"))  # Ryzen AI 1.7
    assert "was built for Ryzen AI 1.8.0, a newer release" in str(load_problem(ModelPackage.open(LLAMA_NPU)))


# ---------------------------------------------------------------------- LangChain: profile
def test_profile_of_a_plain_model():
    profile = ChatRyzenAI(model=str(TINY_QWEN3)).profile
    assert profile is not None
    assert profile["max_input_tokens"] == 4095 and profile["max_output_tokens"] == 4095
    assert profile["text_inputs"] and not profile["image_inputs"]
    assert profile["tool_calling"] and profile["tool_choice"] and profile["structured_output"]
    assert profile["reasoning_output"]
    assert set(profile) <= set(get_type_hints(ModelProfile))  # only keys LangChain declares


def test_profile_of_an_npu_replica_and_its_release():
    assert ChatRyzenAI(model=str(LLAMA_NPU)).profile["max_input_tokens"] == 4095
    old = ChatRyzenAI(model=str(LLAMA_NPU), release="1.5.0").profile
    assert old["max_input_tokens"] == 2048 and old["tool_calling"] and not old["reasoning_output"]
    assert ChatRyzenAI(model=str(QWEN3_NPU)).profile["reasoning_output"]


def test_profile_of_the_vision_fixture():
    profile = ChatRyzenAI(model=str(VISION)).profile
    assert profile["image_inputs"] and not profile["image_url_inputs"]
    assert profile["max_input_tokens"] == 16383
    assert not profile["tool_calling"] and not profile["tool_choice"]


def test_profile_given_by_the_caller_is_kept():
    assert ChatRyzenAI(model=str(TINY_QWEN3), profile={"max_input_tokens": 100}).profile == {"max_input_tokens": 100}


def test_a_profile_the_caller_gives_is_still_checked_by_langchain():
    with pytest.warns(UserWarning, match="Unrecognized keys in model profile: .'bananas'."):
        ChatRyzenAI(model=str(TINY_QWEN3), profile={"max_input_tokens": 100, "bananas": 1})


def test_a_model_not_downloaded_builds_with_an_empty_profile():
    llm = ChatRyzenAI(model="amd/Not-Downloaded_rai_1.8.0_npu_4K")
    assert llm.profile == {} and not llm.profile and llm.profile.get("max_input_tokens") is None


def test_the_profile_is_read_when_first_used_and_copies_keep_it():
    llm = ChatRyzenAI(model=str(TINY_LLAMA))
    assert isinstance(llm.profile, dict) and not llm.profile.filled  # building read nothing
    unread = copy.deepcopy(llm)
    assert llm.profile["max_input_tokens"] == 4095 and llm.profile.filled
    assert not unread.profile.filled and unread.profile == llm.profile
    assert ChatRyzenAI(model=str(TINY_LLAMA)) == ChatRyzenAI(model=str(TINY_LLAMA))  # two profiles not read yet
    assert pickle.loads(pickle.dumps(llm.profile)) == dict(llm.profile)


def test_serializing_a_model_leaves_its_profile_unread():
    """LangChain serializes the model at every call's start (its run's record): the profile is no part of it."""
    llm = ChatRyzenAI(model=str(TINY_LLAMA), temperature=0.5)
    first = dumpd(llm)
    assert not llm.profile.filled and "profile" not in first["kwargs"] and first["kwargs"]["temperature"] == 0.5
    assert llm.profile["max_input_tokens"] == 4095
    assert dumpd(llm) == first  # the same once it is read


def test_building_a_model_reads_its_package_once(monkeypatch):
    ChatRyzenAI(model=str(TINY_LLAMA))
    opened: list[Path] = []
    real_open = ModelPackage.open.__func__

    def counting_open(cls, path, **kwargs):
        opened.append(Path(path))
        return real_open(cls, path, **kwargs)

    monkeypatch.setattr(ModelPackage, "open", classmethod(counting_open))
    for _ in range(10):
        assert ChatRyzenAI(model=str(TINY_LLAMA)).profile["max_input_tokens"] == 4095
    assert opened == []  # no model load, no second read of the folder
