"""The package's capabilities in LangChain's words: a ``ModelProfile`` (``ChatRyzenAI.profile``).

LangChain v1 reads a chat model's limits and features from ``model.profile``: agents'
summarization middleware, for one, summarizes a conversation before it outgrows
``max_input_tokens``. The core reads them from the package's files
(:func:`ryzenai_core.package.capabilities.read_capabilities`); this module only renames them. Only
keys every ``ModelProfile`` since langchain-core 1.3 declares are set (a newer key would
make an older core warn about an unknown key).

LangChain fills ``profile`` while the model object is built; a :class:`PackageProfile` reads the
package's files only when a key is first read, so building a model object reads nothing.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from ryzenai_core.package.capabilities import Capabilities, read_capabilities

if TYPE_CHECKING:
    from langchain_core.language_models import ModelProfile

__all__ = ["PackageProfile", "model_profile"]


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


class PackageProfile(dict[str, Any]):
    """A ``ModelProfile`` read from the package's files when it is first used (a ``dict``, as LangChain's).

    Every read or write (``[key]``, ``get``, ``in``, ``len``, iteration, ``==``, ``dict(profile)``,
    ``update``, ...) fills it first; a package that cannot be read yet (a repository not
    downloaded, a config that is an LFS pointer) gives an empty profile: no key is known, and the
    first call says what is wrong. A copy of one not filled yet is not filled either.
    """

    def __init__(self, model: str, release: str | None = None, chat_template: str | None = None) -> None:
        super().__init__()
        self.source = (model, release, chat_template)
        self.filled = False
        self._lock = threading.Lock()

    def fill(self) -> PackageProfile:
        """Read the package's capabilities into this profile (once); returns it."""
        if not self.filled:
            with self._lock:
                if not self.filled:
                    model, release, chat_template = self.source
                    caps = read_capabilities(model, release=release, chat_template=chat_template)
                    if caps is not None:
                        dict.update(self, model_profile(caps))
                    self.filled = True
        return self

    def __reduce__(self) -> tuple[Any, ...]:
        if self.filled:
            return dict, (dict.copy(self),)  # a copy or a pickle of a read profile is a plain dict
        return type(self), self.source


def _filling(name: str) -> Any:
    """``dict.<name>`` on the profile once it is filled (another profile it is given too: ``a == b``)."""
    method = getattr(dict, name)

    def filled(self: PackageProfile, *args: Any, **kwargs: Any) -> Any:
        return method(self.fill(), *(a.fill() if isinstance(a, PackageProfile) else a for a in args), **kwargs)

    filled.__name__, filled.__qualname__, filled.__doc__ = name, f"PackageProfile.{name}", method.__doc__
    return filled


for _name in (
    "__contains__",
    "__eq__",
    "__getitem__",
    "__ior__",
    "__iter__",
    "__len__",
    "__ne__",
    "__or__",
    "__repr__",
    "__reversed__",
    "__ror__",
    "__delitem__",
    "__setitem__",
    "clear",
    "copy",
    "get",
    "items",
    "keys",
    "pop",
    "popitem",
    "setdefault",
    "update",
    "values",
):
    setattr(PackageProfile, _name, _filling(_name))
