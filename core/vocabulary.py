"""The words of a call: how a caller may name its options, read once for every face.

The options themselves (their names, values and limits) are
:class:`~ryzenai_core.options.GenerationOptions`' fields. Every face (LangChain, LlamaIndex, the
command line) reads a call's keywords with :func:`call_options`, which knows

* the options' own names, and each face's names for its framework's conventions
  (LangChain's ``max_tokens``), given by the face;
* :data:`ALIASES`: other runtimes' and providers' names for an option
  (``max_completion_tokens``, ``random_seed``, ``stop_sequences``, ``reasoning``, ...); the
  :data:`REASONING_WORDS` name ``enable_thinking`` when given a bool and ``reasoning_effort``
  when given a level (``reasoning="high"``, as ChatOllama takes it);
* :data:`UNSUPPORTED`: names of options other runtimes have and the core does not
  (``max_length``, ``num_beams``, ``do_sample``, ``presence_penalty``, ...), each with what to use
  instead, worded with the face's own names for the options it points to;
* :func:`did_you_mean`: the closest known name of a misspelt setting or keyword, with one
  cut-off for every face (LLMs, embeddings, rerankers); :func:`refuse_unknown_keywords` the error
  of a call given keywords it does not take.

Plain data and functions; a worker does not need them (its options arrive made).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from typing import Any

from .errors import InvalidRequestError
from .options import CALL_SETTINGS, OPTIONS

__all__ = [
    "ALIASES",
    "NONE_IS_A_CHOICE",
    "REASONING_WORDS",
    "SUGGESTION_CUTOFF",
    "UNSUPPORTED",
    "call_options",
    "did_you_mean",
    "given_twice",
    "not_options",
    "option_name",
    "refuse_unknown_keywords",
    "unsupported",
]

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
    "thinking": "enable_thinking",
    "think": "enable_thinking",
}
#: Words for reasoning that take a bool (on/off: ``enable_thinking``) or an effort level (a string:
#: ``reasoning_effort``): ChatOllama's ``reasoning``, LlamaIndex's Ollama ``thinking``, Ollama's ``think``.
REASONING_WORDS = ("reasoning", "thinking", "think")
#: Options whose None, given per call, is a choice rather than "not given": ``adapter=None`` runs the
#: base model, whatever adapter the model object runs with otherwise.
NONE_IS_A_CHOICE = ("adapter",)

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


def option_name(key: str, owner: str, names: Mapping[str, str], value: Any = None, where: str = "") -> str:
    """The option ``key`` names: its own name, the face's name for it (``names``) or an alias; ``""`` if none.

    Raises:
        InvalidRequestError: ``key`` is an option the core does not have (with what to use instead).
    """
    if key in UNSUPPORTED:
        raise unsupported(key, value, owner, names, where)
    if key in OPTIONS:
        return key
    own = next((name for name, called in names.items() if called == key), None)
    if own is None and key in REASONING_WORDS and isinstance(value, str):
        return "reasoning_effort"  # reasoning="high": a level, not on/off
    return own or ALIASES.get(key, "")


def call_options(
    owner: str, given: Mapping[str, Any], names: Mapping[str, str] | None = None, keep: Collection[str] = ()
) -> dict[str, Any]:
    """A call's keyword arguments by the options' own names, the one vocabulary of every face.

    A keyword may name an option by its own name, by the face's name for it (``names``:
    LangChain's ``max_tokens``) or by an alias (:data:`~ryzenai_core.vocabulary.ALIASES`); an
    option given as None is not given. ``timeout`` (None: no limit) and the face's own keywords
    (``keep``) come back as given. (``adapter=None`` is given: the base model, see
    :data:`NONE_IS_A_CHOICE`.)

    Args:
        owner: who takes the call, for messages (``"ChatRyzenAI"``).
        given: the call's keyword arguments.
        names: the face's names for options (``{"max_new_tokens": "max_tokens"}``).
        keep: keywords the face reads itself (LangChain's ``model_kwargs``, ``model``).

    Raises:
        InvalidRequestError: an option the core does not have (with what to use instead); an
            unknown keyword (with the closest accepted one, and all of them); one option given
            under two names with different values.
    """
    names = names or {}
    out: dict[str, Any] = {}
    by: dict[str, str] = {}  # option -> the keyword that gave it
    unknown = []
    for key, value in given.items():
        if key in keep or key in CALL_SETTINGS:
            out[key] = value
            continue
        name = option_name(key, owner, names, value)
        if not name:
            unknown.append(key)
        elif value is not None or name in NONE_IS_A_CHOICE:
            if name in out and out[name] != value:
                raise given_twice(names.get(name, name), by[name], out[name], key, value)
            out[name], by[name] = value, key
    if unknown:
        accepted = {names.get(o, o) for o in OPTIONS} | set(keep) | set(CALL_SETTINGS)
        refuse_unknown_keywords(owner, unknown, accepted)
    return out


def given_twice(
    name: str, first: str, first_value: Any, second: str, value: Any, note: str = ""
) -> InvalidRequestError:
    """The error of one option given under two names (or in two places) with different values (``note`` added)."""
    return InvalidRequestError(
        f"{name} is given twice: {first}={first_value!r} and {second}={value!r}; give it once{note}"
    )


def not_options(given: Mapping[str, Any], names: Mapping[str, str]) -> list[str]:
    """What is wrong with each name of ``given`` (none an option's), for ``validated_options``.

    The option it most likely means, or what to use instead of an option the core does not have.
    """
    problems = []
    for key, value in given.items():
        if key in UNSUPPORTED:
            problems.append(str(unsupported(key, value, "ryzenai-llm", names)))
        else:
            close = ALIASES.get(key) or did_you_mean(key, OPTIONS)
            problems.append(f"{key}={value!r}: not an option" + (f" (did you mean {close!r}?)" if close else ""))
    return problems
