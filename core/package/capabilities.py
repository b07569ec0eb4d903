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
from .folder import ModelPackage
from .hub import resolve_model
from .runtime import ENV_RELEASE, parse_release, runtime_info

if TYPE_CHECKING:  # the template machinery (Jinja) loads when a package's capabilities are first read
    from ..prompt.templates import ChatTemplate

__all__ = ["Capabilities", "capabilities", "load_problem", "read_capabilities"]

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
        key = (os.environ.get(ENV_RELEASE), runtime_info(), stamp.st_mtime_ns, stamp.st_size)
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

    Read from the package's files and the installed runtime's metadata (onnxruntime-genai
    is not imported): a Ryzen AI package needs AMD's Ryzen AI build of onnxruntime-genai, of
    a release not older than the one the package was built for, and every file the model
    needs must hold content, not a Git LFS pointer. Whether the NPU driver answers shows
    only when the model loads.

    Args:
        package: the opened package.
        provider: the provider a call asks for (None: the package's own).
    """
    info = runtime_info()
    if package.is_ryzenai and provider is None and not info.ryzenai:
        return RuntimeNotAvailableError(
            f"{package.name} is a Ryzen AI package ({package.mode.value}, {package.provider} provider"
            f"{', release ' + package.release if package.release else ''}) and needs AMD's Ryzen AI build of "
            f"onnxruntime-genai; found {info.describe()}. On a Ryzen AI PC, activate the Ryzen AI "
            "environment (e.g. `conda activate ryzen-ai-1.8.0`). To run its weights on the CPU anyway "
            "(only plain ONNX graphs can), pass provider='cpu'."
        )
    built = package.built_for
    if package.is_ryzenai and provider is None and info.release and built and _newer(built, info.release):
        return RuntimeNotAvailableError(
            f"{package.name} was built for Ryzen AI {built}, a newer release than the installed runtime "
            f"({info.describe()}), which cannot run it. Activate the Ryzen AI {built} environment "
            f"(e.g. `conda activate ryzen-ai-{built}`), or use the package built for release {info.release}."
        )
    if not info.installed and importlib.util.find_spec("onnxruntime_genai") is None:
        return RuntimeNotAvailableError(
            f"{package.name} needs onnxruntime-genai, and none is installed. On a Ryzen AI PC, activate the "
            "environment the Ryzen AI installer created (e.g. `conda activate ryzen-ai-1.8.0`); elsewhere "
            "install the CPU build with `pip install 'ryzenai-llm[cpu]'`."
        )
    try:
        package.check_loadable()
        if package.is_ryzenai and provider is None:
            package.check_npu_files()  # what AMD's native loader reads: cache/, the state files
    except ModelPackageError as exc:
        return exc
    return None


def _newer(release: str, than: str) -> bool:
    """Whether ``release`` is a later Ryzen AI line (major.minor) than ``than``."""
    return parse_release(release)[:2] > parse_release(than)[:2]
