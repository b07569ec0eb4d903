"""What the framework faces share (LangChain's and LlamaIndex's): no framework is imported here.

* :class:`LLMSettings`: the settings both LLM faces declare once (model, runtime, sampling,
  limits, retries), a pydantic mixin; each face adds its framework's own names (LangChain's
  ``max_tokens``, LlamaIndex's ``max_new_tokens``) and maps its calls onto the core's
  :class:`~ryzenai_core.request.Request`.
* :func:`did_you_mean`: the closest known name of a misspelt setting or keyword, with one
  cut-off for every face (LLMs, embeddings, rerankers); :func:`refuse_unknown_keywords` the error
  of a call given keywords it does not take.

This module sits above the engine (it opens engines for the faces, importing it on first use);
nothing in the core imports it.
"""

from __future__ import annotations

import difflib
from collections.abc import Collection, Iterable
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, Field

from .errors import InvalidRequestError
from .messages import ChatMessage, RawPrompt
from .options import GenerationOptions, ModelName, Provider
from .request import Request

if TYPE_CHECKING:
    from .engine.engine import Engine

__all__ = ["SUGGESTION_CUTOFF", "LLMSettings", "did_you_mean", "refuse_unknown_keywords"]

#: How alike a misspelt name and a known one must be for the known one to be suggested
#: (:func:`difflib.get_close_matches`' ratio): ``temprature`` -> ``temperature``,
#: ``batchsize`` -> ``batch_size``, ``topn`` -> ``top_n``, never ``frobnicate`` -> anything.
SUGGESTION_CUTOFF = 0.6


def did_you_mean(name: str, known: Iterable[str]) -> str | None:
    """The name among ``known`` that ``name`` is most likely a misspelling of, if any."""
    match = difflib.get_close_matches(str(name), sorted(set(known)), n=1, cutoff=SUGGESTION_CUTOFF)
    return match[0] if match else None


def refuse_unknown_keywords(owner: str, given: Iterable[str], accepted: Collection[str]) -> None:
    """Refuse the keyword arguments of a call that ``owner`` does not take.

    Raises:
        InvalidRequestError: naming each unknown keyword, the known one it is most likely a
            misspelling of, and every keyword a call accepts.
    """
    unknown = sorted(set(given) - set(accepted))
    if unknown:
        hints = [(k, did_you_mean(k, accepted)) for k in unknown]
        named = ", ".join(f"{k} (did you mean {m!r}?)" if m else k for k, m in hints)
        raise InvalidRequestError(
            f"{owner} does not take the keyword argument(s) {named}; accepted per call: {', '.join(sorted(accepted))}"
        )


class LLMSettings(BaseModel):
    """What both LLM faces take to choose, run and sample a model package (a pydantic mixin).

    ``None`` means the package's default (its ``genai_config.json`` search section, its
    template's default, its KV policy). The faces add their framework's names for the output
    limit and the stop strings, and their own extras.
    """

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
    kv_reuse: bool | None = Field(None, description="reuse the KV cache of a shared prompt prefix; None = package")
    overflow: Literal["error", "drop_oldest"] = Field(
        "error", description="a prompt over the limit: raise, or drop the oldest turns"
    )
    chat_template: str | None = Field(None, description="Jinja chat template (source or file) to use instead")

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
            "kv_reuse": self.kv_reuse,
            "overflow": self.overflow,
            "chat_template": self.chat_template,
        }

    def core_request(
        self,
        messages: list[ChatMessage] | RawPrompt,
        options: GenerationOptions,
        timeout: float | None,
    ) -> Request:
        """The core request of one call, with these settings' retries."""
        return Request(messages, options, timeout, self.max_retries)
