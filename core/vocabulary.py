"""The words a caller may use for a call's options, beyond the options' own names.

Every face (LangChain, LlamaIndex, the command line, a direct caller) reads the same words:

* :data:`ALIASES`: other runtimes' and providers' names for an option
  (``max_tokens``, ``random_seed``, ``stop_sequences``, ``reasoning``, ...);
* :data:`UNSUPPORTED`: names of options other runtimes have and the core does not
  (``max_length``, ``num_beams``, ``do_sample``, ``presence_penalty``, ...), each with what to use
  instead, worded with the face's own names for the options it points to;
* :func:`did_you_mean`: the closest known name of a misspelt setting or keyword, with one
  cut-off for every face (LLMs, embeddings, rerankers); :func:`refuse_unknown_keywords` the error
  of a call given keywords it does not take.

The options themselves (their names, values and limits) are
:class:`~ryzenai_core.options.GenerationOptions`', which reads a call's keywords with these words
(:func:`~ryzenai_core.options.call_options`). Plain data and functions: a worker imports this too.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping

from .errors import InvalidRequestError

__all__ = ["ALIASES", "SUGGESTION_CUTOFF", "UNSUPPORTED", "did_you_mean", "refuse_unknown_keywords", "unsupported"]

#: How alike a misspelt name and a known one must be for the known one to be suggested
#: (:func:`difflib.get_close_matches`' ratio): ``temprature`` -> ``temperature``,
#: ``batchsize`` -> ``batch_size``, ``topn`` -> ``top_n``, never ``frobnicate`` -> anything.
SUGGESTION_CUTOFF = 0.6

#: Other names of a call's options, as other runtimes and providers spell them -> the option.
ALIASES = {
    "max_tokens": "max_new_tokens",
    "max_completion_tokens": "max_new_tokens",
    "max_output_tokens": "max_new_tokens",
    "random_seed": "seed",
    "stop_sequences": "stop",
    "reasoning": "enable_thinking",
}

_BEAM_SEARCH = "beam search is not supported (decoding is greedy or sampled); leave it out"
_ONE_ANSWER = "a call returns one answer; make one call per answer (or batch them)"
_NO_LOGPROBS = "token log-probabilities are not reported"
_PENALTY = "use {repetition_penalty}"
_TRUNCATION = "use {top_p} or {top_k}"
#: Options of other runtimes and providers that the core does not have -> what to use instead
#: (``{name}`` is the face's name for the option ``name``).
UNSUPPORTED = {
    "max_length": (
        "onnxruntime-genai's max_length counts prompt + new tokens, and it is set from the package's budget; "
        "use {max_new_tokens} (new tokens)"
    ),
    "min_length": "a minimum answer length is not supported; leave it out",
    "min_new_tokens": "a minimum answer length is not supported; leave it out",
    "do_sample": "use {temperature}=0 for greedy decoding, a positive {temperature} to sample",
    "num_beams": _BEAM_SEARCH,
    "length_penalty": _BEAM_SEARCH,
    "early_stopping": _BEAM_SEARCH,
    "diversity_penalty": _BEAM_SEARCH,
    "num_return_sequences": _ONE_ANSWER,
    "n": _ONE_ANSWER,
    "presence_penalty": _PENALTY,
    "frequency_penalty": _PENALTY,
    "no_repeat_ngram_size": _PENALTY,
    "min_p": _TRUNCATION,
    "typical_p": _TRUNCATION,
    "num_predict": "use {max_new_tokens}",
    "num_ctx": "the context window is the package's own (the budget_plan of a response reports it)",
    "logprobs": _NO_LOGPROBS,
    "top_logprobs": _NO_LOGPROBS,
    "logit_bias": "constrain the output with {response_format} (structured output) or {guidance}",
}


class _Named(dict[str, str]):
    """A face's names for the options, each option's own name where the face has none."""

    def __missing__(self, key: str) -> str:
        return key


def unsupported(key: str, value: object, owner: str, names: Mapping[str, str], where: str = "") -> InvalidRequestError:
    """The error of an option in :data:`UNSUPPORTED`, worded with the face's ``names`` for the options.

    Args:
        key: the option's name as given (a key of :data:`UNSUPPORTED`).
        value: its value.
        owner: who was given it, for the message (``"ChatRyzenAI"``).
        names: the face's names for the core's options (``{"max_new_tokens": "max_tokens"}``).
        where: how the caller gave it (``"model_kwargs"``: ``model_kwargs['num_beams']=4``; default: a keyword).
    """
    given = f"{where}[{key!r}]" if where else key
    fix = UNSUPPORTED[key].format_map(_Named(names))
    return InvalidRequestError(f"{given}={value!r} is a generation option {owner} does not have: {fix}")


def did_you_mean(name: str, known: Iterable[str]) -> str | None:
    """The name among ``known`` that ``name`` is most likely a misspelling of, if any."""
    import difflib  # only when a name is wrong

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
