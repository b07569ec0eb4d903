"""The package's capabilities in LangChain's words: a ``ModelProfile`` (``ChatRyzenAI.profile``).

LangChain v1 reads a chat model's limits and features from ``model.profile``: agents'
summarization middleware, for one, summarizes a conversation before it outgrows
``max_input_tokens``. The core reads them from the package's files
(:func:`ryzenai_core.package.capabilities.read_capabilities`); this module only renames them. Only
keys every ``ModelProfile`` since langchain-core 1.3 declares are set (a newer key would
make an older core warn about an unknown key).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ryzenai_core.package.capabilities import Capabilities

if TYPE_CHECKING:
    from langchain_core.language_models import ModelProfile

__all__ = ["model_profile"]


def model_profile(caps: Capabilities) -> ModelProfile:
    """The ``ModelProfile`` of a package with these capabilities."""
    profile: ModelProfile = {
        "name": caps.name,
        "max_input_tokens": caps.prompt_limit,
        "max_output_tokens": caps.max_output_tokens,
        "text_inputs": True,
        "image_inputs": caps.images,
        "image_url_inputs": False,  # web addresses are refused: the engine never fetches from the network
        "image_tool_message": False,
        "pdf_inputs": False,
        "pdf_tool_message": False,
        "audio_inputs": False,
        "video_inputs": False,
        "text_outputs": True,
        "image_outputs": False,
        "audio_outputs": False,
        "video_outputs": False,
        "reasoning_output": caps.reasoning,
        "tool_calling": caps.tools,
        "tool_choice": caps.tools,  # forced calls are generated under a grammar in the family's format
        "structured_output": caps.structured_output,
        "temperature": True,
    }
    return profile
