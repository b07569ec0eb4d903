"""What a model package can do, and whether it loads here, from its files alone.

Both faces describe a model to their framework from the same facts: LangChain's
``ChatRyzenAI.profile`` and LlamaIndex's ``RyzenAILLM.metadata`` map :class:`Capabilities`
onto their own words, and ``ryzenai-llm pull`` / ``list`` / ``info`` report
:func:`load_problem`. Nothing here loads weights or imports onnxruntime-genai::

    ModelPackage (genai_config.json, rai_config.json, tokenizer files, file names)
      + ChatTemplate (the tools and reasoning it renders)
      ─► capabilities() ─► Capabilities: prompt limit, output, images, tools, reasoning
    a model name ─► read_capabilities(): the same, resolved locally and cached; None when it
      cannot be read (a repository not downloaded yet, a config that is an LFS pointer)

    ModelPackage + the installed runtime's metadata ─► load_problem(): None, or why not
"""

from __future__ import annotations

import importlib.util
import logging
import os
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

from ..errors import ModelPackageError, RuntimeNotAvailableError, RyzenAIError
from .ep import ENV_EP_PATH, NpuRuntime, npu_runtime
from .folder import ModelPackage
from .hub import resolve_model
from .runtime import ENV_RELEASE, env_release, parse_release, runtime_info, setup_hint

if TYPE_CHECKING:  # the template machinery (Jinja) loads when a package's capabilities are first read
    from ..prompt.templates import ChatTemplate

__all__ = ["Capabilities", "capabilities", "load_problem", "read_capabilities", "release_problem", "runtime_release"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Capabilities:
    """What one model package can do on the Ryzen AI release it is planned for.

    Attributes:
        name: the package's name.
        prompt_limit: the longest prompt a call accepts: the release's ``max_prompt_length``
            from rai_config.json, never more than the window minus the one token an answer needs.
        prompt_limit_source: where the limit came from (rai_config.json and the release, or the window).
        window: prompt + output tokens the package holds.
        max_output_tokens: the most output one call can get (after a one-token prompt).
        output_budget: the output of a call that sets no limit but needs a finite one
            (constrained output, a framework's reserved output).
        images: whether prompts may hold images (a vision package).
        image_tokens: prompt tokens one image costs, when known.
        tools: whether calls with tools work: the template renders them and the family has a
            call format, so calls are parsed and can be forced (``tool_choice``) by a grammar.
        structured_output: output constrained to a JSON schema by a grammar (any package; a
            runtime without guidance refuses it at call time with ``GuidanceUnsupportedError``).
        reasoning: whether the model's reasoning comes apart from its answer (Qwen3's ``<think>``).
    """

    name: str
    prompt_limit: int
    prompt_limit_source: str
    window: int
    max_output_tokens: int
    output_budget: int
    images: bool
    image_tokens: int | None
    tools: bool
    structured_output: bool
    reasoning: bool


def capabilities(package: ModelPackage, template: ChatTemplate | None = None) -> Capabilities:
    """The capabilities of an opened package with ``template`` (default: the package's own).

    Raises:
        ModelPackageError: the package's limits cannot be read (see :attr:`ModelPackage.budget`).
        ChatTemplateError: the package's template is not valid Jinja.
    """
    from ..prompt.templates import ChatTemplate

    template = template or ChatTemplate.for_package(package)
    budget = package.budget
    return Capabilities(
        name=package.name,
        prompt_limit=budget.max_prompt_tokens,
        prompt_limit_source=budget.prompt_limit_source,
        window=budget.window,
        max_output_tokens=budget.window - 1,
        output_budget=budget.output_tokens(),
        images=package.has_vision,
        image_tokens=package.image_tokens,
        tools=template.calls_tools,
        structured_output=True,
        reasoning=template.reasoning_markers is not None,
    )


def read_capabilities(
    model: str | os.PathLike[str], *, release: str | None = None, chat_template: str | None = None
) -> Capabilities | None:
    """The capabilities of ``model`` as a constructor may ask for them: cheap, and never an error.

    ``model`` is what the faces take (a folder, an embedded model's name, a Hugging Face
    repository id); a repository is only looked up in the cache, never downloaded. The result
    is cached per folder, release (given, in ``RYZENAI_VERSION`` or the installed runtime's),
    template and genai_config.json version, so building a model many times reads its files once.

    Returns:
        None when the package cannot be read now: a repository that is not in the cache, a
        config file that is a Git LFS pointer, a folder that is not a package, a template
        that does not compile. The call that loads the model reports those errors in full.
    """
    try:
        folder = resolve_model(model, offline=True).resolve()
        stamp = (folder / "genai_config.json").stat()
        settings = (os.environ.get(ENV_RELEASE), os.environ.get(ENV_EP_PATH), runtime_info())
        key = (*settings, stamp.st_mtime_ns, stamp.st_size)
        return _read(str(folder), release, chat_template, key)
    except (RyzenAIError, OSError) as exc:
        logger.debug("no capabilities for %s: %s", model, exc)
        return None


@lru_cache(maxsize=64)
def _read(folder: str, release: str | None, chat_template: str | None, key: tuple[object, ...]) -> Capabilities:
    """:func:`capabilities` of a folder; ``key`` (what else decides the answer) is part of the cache key only."""
    from ..prompt.templates import ChatTemplate

    package = ModelPackage.open(folder, release=release)
    template = ChatTemplate.for_package(package, override=chat_template) if chat_template else None
    return capabilities(package, template)


def load_problem(package: ModelPackage, provider: str | None = None) -> RyzenAIError | None:
    """Why ``package`` cannot load here, or None when nothing stands in the way that files can show.

    Read from the package's files, the installed runtime's metadata and its Ryzen AI EP library
    (loaded in a child process; onnxruntime-genai is not imported here): a Ryzen AI package needs
    a runtime that can run the NPU (:func:`~.ep.npu_runtime`) of the release the package was built
    for (:func:`release_problem`), and every file the model needs must hold content, not a Git LFS
    pointer. Whether the NPU driver answers shows only when the model loads.

    Args:
        package: the opened package.
        provider: the provider a call asks for (None: the package's own).
    """
    what = (
        f"{package.name} is a Ryzen AI package ({package.mode.value}, {package.provider} provider"
        f"{', release ' + package.release if package.release else ''})"
    )
    cpu = "To run its weights on the CPU anyway (only plain ONNX graphs can), pass provider='cpu'."
    if package.is_ryzenai and provider is None and package.layout == "ryzenai":
        runtime = npu_runtime()
        if not runtime.usable:
            return RuntimeNotAvailableError(
                f"{what} and needs onnxruntime-genai with AMD's Ryzen AI EP library; found "
                f"{runtime.info.describe()}, and {str(runtime.problem).rstrip('.')}. {cpu}"
            )
        mismatch = release_problem(package, runtime)
        if mismatch is not None:
            return RuntimeNotAvailableError(mismatch)
    elif package.is_ryzenai and provider is None and not (info := runtime_info()).ryzenai:
        # The 1.3-1.6 layouts (custom ops, the 1.4 VitisAI provider) run only on AMD's build of their release.
        return RuntimeNotAvailableError(
            f"{what} in the {package.layout} layout of Ryzen AI 1.3-1.6, which only AMD's build of onnxruntime-genai "
            f"of that release loads; found {info.describe()}. On a Ryzen AI PC, {setup_hint()}. {cpu}"
        )
    # The import system first: the installed distributions' metadata (importlib.metadata, 20-30 ms to
    # import in a model worker) only when it finds none.
    if importlib.util.find_spec("onnxruntime_genai") is None and not runtime_info().installed:
        return RuntimeNotAvailableError(
            f"{package.name} needs onnxruntime-genai, and none is installed. On a Ryzen AI PC, {setup_hint()}; "
            "elsewhere install the CPU build with `pip install 'ryzenai-llm[cpu]'`."
        )
    try:
        package.check_loadable()
        if package.is_ryzenai and provider is None:
            package.check_npu_files()  # what AMD's native loader reads: cache/, the state files
    except ModelPackageError as exc:
        return exc
    return None


def runtime_release(runtime: NpuRuntime | None = None) -> tuple[str | None, str]:
    """The Ryzen AI release of the runtime that runs Ryzen AI packages here, and where it came from.

    ``RYZENAI_VERSION`` when set (it says which release the runtime is), else the runtime's own
    (see :class:`~.ep.NpuRuntime`); None when neither is known.
    """
    env = env_release()
    if env:
        return env, f"{ENV_RELEASE}={env}"
    runtime = runtime or npu_runtime()
    return runtime.release, runtime.describe()


def release_problem(package: ModelPackage, runtime: NpuRuntime | None = None) -> str | None:
    """Why ``package`` and the runtime are of different Ryzen AI releases (major.minor), or None.

    AMD: "Models from earlier releases are not compatible with this version"; a package of a
    newer release needs that release's runtime. Unknown on either side (a name without a
    release, a runtime whose version maps to none) is no problem here (``doctor`` says so).
    """
    built = package.built_for
    runs, source = runtime_release(runtime)
    if not (package.is_ryzenai and built and runs) or parse_release(built)[:2] == parse_release(runs)[:2]:
        return None
    which = "an older" if parse_release(built)[:2] < parse_release(runs)[:2] else "a newer"
    return (
        f"{package.name} was built for Ryzen AI {built}, {which} release than the runtime that would run it "
        f"(Ryzen AI {runs}: {source}); AMD's packages run only on the release they were built for. Use the "
        f"package built for Ryzen AI {runs} (AMD's Hugging Face collection for that release), or run in the Ryzen AI "
        f"{built} environment. If this runtime is in fact release {built}, set {ENV_RELEASE}={built}."
    )
