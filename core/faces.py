"""What the framework faces share (LangChain's and LlamaIndex's): no framework is imported here.

* :class:`LLMSettings`: the settings both LLM faces declare once (model, runtime, sampling,
  limits, retries), a pydantic mixin; each face adds its framework's own names (LangChain's
  ``max_tokens``, LlamaIndex's ``max_new_tokens``) and maps its calls onto the core's
  :class:`~ryzenai_core.request.Request`.
* :data:`ModelName`, :data:`Provider`: the types of the faces' ``model`` and ``provider`` fields.
* :func:`reasoning_words`: a constructor's words for reasoning (ChatOllama's ``reasoning``,
  LlamaIndex's Ollama ``thinking``) as the settings they name: a bool ``enable_thinking``, a
  level ``reasoning_effort``.

A call's options and the words for them are the core's (:mod:`ryzenai_core.options`,
:mod:`ryzenai_core.vocabulary`); a face maps only its framework's conventions onto them.

This module sits above the engine (it opens engines for the faces, importing it on first use);
nothing in the core imports it.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, Field, model_validator
from typing_extensions import Self

from .adapters import adapter_files, chosen_adapter
from .messages import ChatMessage, RawPrompt
from .options import Effort, GenerationOptions, check_runtime_settings, validated_options
from .request import Request
from .vocabulary import call_options, given_twice

if TYPE_CHECKING:
    from .engine.engine import Engine

__all__ = ["LLMSettings", "ModelName", "Provider", "reasoning_words"]


def _model_name(value: Any) -> Any:
    """A folder given as a path object, as the text the caller gave (``Path`` -> ``str``)."""
    return os.fspath(value) if isinstance(value, os.PathLike) else value


def _provider(value: str | None) -> str | None:
    check_runtime_settings(value)  # when a model object is made, not at its first call
    return value


#: A model as the caller named it: a package folder (a path object becomes its text), a Hugging
#: Face repository id or an embedded model's name. For the faces' ``model`` fields.
ModelName = Annotated[str, BeforeValidator(_model_name)]
#: An execution provider a runtime takes (None: the package's own). For the faces' ``provider`` fields.
Provider = Annotated[str | None, AfterValidator(_provider)]


def reasoning_words(fields: Mapping[str, Any], words: Collection[str]) -> dict[str, Any]:
    """Constructor ``fields`` with each of ``words`` given moved to the setting it names.

    A bool (or None) is reasoning on or off (``enable_thinking``), a string an effort level
    (``reasoning_effort``): ``reasoning=True``, ``reasoning="high"`` as ChatOllama takes them,
    ``thinking`` as LlamaIndex's Ollama LLM does.

    Raises:
        InvalidRequestError: the setting given twice with different values.
    """
    out = dict(fields)
    for word in words:
        if word not in out:
            continue
        value = out.pop(word)
        name = "reasoning_effort" if isinstance(value, str) else "enable_thinking"
        if out.get(name) is not None and value is not None and out[name] != value:
            raise given_twice(name, name, out[name], word, value)
        if value is not None or name not in out:
            out[name] = value
    return out


class LLMSettings(BaseModel):
    """What both LLM faces take to choose, run and sample a model package (a pydantic mixin).

    ``None`` means the package's default (its ``genai_config.json`` search section, its
    template's default, its KV policy). The faces add their framework's names for the output
    limit and the stop strings, and their own extras.
    """

    #: The face's names for the core's options, its framework's conventions (LangChain's
    #: ``{"max_new_tokens": "max_tokens"}``): taken per call and used in error messages.
    option_names: ClassVar[Mapping[str, str]] = {}
    #: A call's keywords that are the face's own, not options (LangChain's ``model_kwargs``, ``model``).
    framework_keywords: ClassVar[tuple[str, ...]] = ()

    model: ModelName = Field(
        min_length=1, description="model package folder, Hugging Face repository id or embedded model name"
    )
    temperature: float | None = Field(None, ge=0.0, le=100.0, description="0 = greedy; None = the package's default")
    top_p: float | None = Field(None, gt=0.0, le=1.0, description="nucleus sampling mass; None = the package's default")
    top_k: int | None = Field(None, ge=0, description="sample among the k most likely tokens; None = the package's")
    repetition_penalty: float | None = Field(None, gt=0.0, description="1.0 = none; None = the package's default")
    seed: int | None = Field(None, ge=0, description="random seed for sampling")
    timeout: float | None = Field(None, gt=0.0, description="seconds a call may take; it is cancelled after")
    max_retries: int = Field(1, ge=0, description="new attempts after the model worker died before any output")
    provider: Provider = Field(None, description="None or 'auto' (the package's own), 'npu', 'cpu', 'cuda' or 'dml'")
    num_threads: int | None = Field(None, ge=1, description="CPU threads of the runtime")
    release: str | None = Field(None, description="Ryzen AI release to plan the budget for (default: detected)")
    execution: Literal["process", "inline"] | None = Field(
        None, description="'process' (default: a worker process keeps the event loop free) or 'inline'"
    )
    session_options: dict[str, Any] = Field(
        default_factory=dict, description="ONNX Runtime session options overlaid on the package's"
    )
    enable_thinking: bool | None = Field(None, description="Qwen3-style reasoning on/off; None = template default")
    reasoning_effort: Effort | None = Field(
        None,
        description="'none' turns reasoning off; 'low', 'medium', 'high' go to a template with levels (gpt-oss's), "
        "and are refused by one with reasoning on/off only (Qwen3's)",
    )
    kv_reuse: bool | None = Field(None, description="reuse the KV cache of a shared prompt prefix; None = package")
    overflow: Literal["error", "drop_oldest"] = Field(
        "error", description="a prompt over the limit: raise, or drop the oldest turns"
    )
    chat_template: str | None = Field(None, description="Jinja chat template (source or file) to use instead")
    adapters: Annotated[dict[str, str], BeforeValidator(adapter_files)] = Field(
        default_factory=dict,
        description="LoRA adapters a call may choose, by name: {'sql': 'adapters/sql.onnx_adapter'}; each file is "
        "loaded once per model worker, when a call first chooses it",
    )
    adapter: str | None = Field(
        None, description="the adapter a call runs with unless it chooses another (a name of adapters); None = base"
    )

    @model_validator(mode="after")
    def _adapter_is_named(self) -> Self:
        chosen_adapter(self.adapter, self.adapters, type(self).__name__)  # a name of adapters, or None
        return self

    def runtime_settings(self) -> dict[str, Any]:
        """What :meth:`Engine.get <ryzenai_core.engine.engine.Engine.get>` takes among these settings."""
        return {
            "provider": self.provider,
            "num_threads": self.num_threads,
            "release": self.release,
            "execution": self.execution,
            "session_options": self.session_options or None,
        }

    def open_engine(self, model: str | None = None) -> Engine:
        """The shared engine of ``model`` (default: this one's) with these runtime settings; loads lazily."""
        from .engine.engine import Engine  # on first use: importing a face does not load the engine

        return Engine.get(model or self.model, **self.runtime_settings())

    def worker_pid(self) -> int | None:
        """The process id of the model's worker (None before the model loads, or with ``execution="inline"``)."""
        return self.open_engine().worker_pid()

    def sampling_settings(self) -> dict[str, Any]:
        """The generation options these settings give a call (None: not set), by the core's names."""
        return {
            "temperature": self.temperature,
            "top_p": self.top_p,
            "top_k": self.top_k,
            "repetition_penalty": self.repetition_penalty,
            "seed": self.seed,
            "enable_thinking": self.enable_thinking,
            "reasoning_effort": self.reasoning_effort,
            "kv_reuse": self.kv_reuse,
            "overflow": self.overflow,
            "chat_template": self.chat_template,
            "adapter": self.adapter,
        }

    def call_options(self, kwargs: Mapping[str, Any]) -> dict[str, Any]:
        """A call's keywords by the options' own names (see :func:`~ryzenai_core.vocabulary.call_options`).

        Read with the core's vocabulary and this face's names; ``timeout`` and the face's own
        keywords come back as given.
        """
        return call_options(type(self).__name__, kwargs, self.option_names, self.framework_keywords)

    def generation_options(self, own: Mapping[str, Any], call: Mapping[str, Any]) -> GenerationOptions:
        """The options of one call: the call's over the face's fields and these settings.

        Args:
            own: the face's own fields, by the options' names (``{"max_new_tokens": ..., "stop": ...}``).
            call: the call's options, by the options' names (:meth:`call_options`).

        A field set to None is not sent (the package's default); ``template_vars`` of the call
        are added to the fields' (a call's variable over a field's of the same name). The
        ``adapter`` chosen by name becomes the file it names in ``adapters``.

        Raises:
            InvalidRequestError: a bad value, named as the face calls it; an adapter name that is
                not among ``adapters`` (listing those that are).
        """
        values = {k: v for k, v in {**self.sampling_settings(), **own}.items() if v is not None}
        for name, value in call.items():
            values[name] = {**values.get(name, {}), **value} if name == "template_vars" else value
        if "adapter" in values:
            called = self.option_names.get("adapter", "adapter")
            values["adapter"] = chosen_adapter(values["adapter"], self.adapters, type(self).__name__, called)
        return validated_options(**values, option_names=dict(self.option_names))

    def core_request(
        self,
        messages: list[ChatMessage] | RawPrompt,
        options: GenerationOptions,
        timeout: float | None,
    ) -> Request:
        """The core request of one call, with these settings' retries."""
        return Request(messages, options, timeout, self.max_retries)
