"""Loading one package's model and tokenizer into onnxruntime-genai, and the errors that explain a failed load.

:func:`load_model` reads the runtime configuration a :class:`SessionKey` asks for (provider,
threads, session options overlaid on the package's), loads ``og.Model`` and ``og.Tokenizer`` and
collects what generation needs from them (end-of-turn ids, the token byte table, the device);
:func:`load_error` turns the runtime's plain exceptions into the library's errors with a fix.
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import InvalidRequestError, ModelPackageError, RuntimeNotAvailableError, UnsupportedModelError
from ..package.capabilities import load_problem
from ..package.ep import EpSearch, explain_ryzenai_failure, prepare_ryzenai_runtime
from ..package.folder import ModelPackage
from ..package.runtime import import_oga, runtime_info, setup_hint, shared_folders
from .token_bytes import TokenBytes

if TYPE_CHECKING:  # a caller reads SessionKey here without the template machinery (jinja2)
    from ..prompt.templates import ChatTemplate

__all__ = [
    "IMAGE_MARKERS",
    "Loaded",
    "SessionKey",
    "device_guess",
    "image_marker_ids",
    "load_error",
    "load_model",
    "load_tokenizer",
    "token_table",
]

log = logging.getLogger(__name__)

#: A vision package's image markers (Gemma 3: an image is ``<start_of_image>``, 256
#: ``<image_soft_token>``, ``<end_of_image>``): the processor writes them, the model must not.
IMAGE_MARKERS = ("<start_of_image>", "<image_soft_token>", "<end_of_image>")


@dataclass(frozen=True)
class SessionKey:
    """What makes two loaded models the same one."""

    path: str
    provider: str | None = None
    num_threads: int | None = None
    release: str | None = None
    session_options: str = "{}"
    """Extra ONNX Runtime session options, as sorted JSON (overlaid on the package's)."""


@dataclass(frozen=True)
class Loaded:
    """A model in memory, with what generation reads from it."""

    model: Any
    tokenizer: Any
    end_ids: frozenset[int]
    """Ids that end a generation: the package's EOS ids and single-token end-of-turn markers."""
    token_bytes: TokenBytes | None
    """The bytes of every token, where the vocabulary maps to them (see :mod:`.token_bytes`)."""
    seconds: float
    device: str
    """The execution provider that runs the model, as onnxruntime-genai names its device."""
    never_sampled: frozenset[int] = frozenset()
    """Ids generation must never pick: a vision package's image markers (:func:`image_marker_ids`)."""


def load_model(key: SessionKey, pkg: ModelPackage, template: ChatTemplate) -> Loaded:
    """Load the model and tokenizer of ``pkg`` as ``key`` asks (see the module docstring).

    Raises:
        the package's load problem, or :func:`load_error`'s error for the runtime's failure.
    """
    provider = key.provider
    problem = load_problem(pkg, provider)
    if problem is not None:
        raise problem
    ep: EpSearch | None = None
    if pkg.is_ryzenai and provider is None:
        # What AMD's native loader reads, checked before it fails deep in native code; then the
        # EP library made findable as AMD's tools do, in the process that loads the model.
        for warning in [*pkg.check_npu_files(), *pkg.path_warnings, *_environment_warnings()]:
            log.warning(warning)
        ep = prepare_ryzenai_runtime()
    og = import_oga()
    start = time.perf_counter()
    try:
        config = og.Config(str(pkg.path))
        if provider is not None:
            config.clear_providers()
            if provider != "cpu":
                config.append_provider(provider)
        threads = key.num_threads
        if threads is None and (provider == "cpu" or (provider is None and pkg.provider == "cpu")):
            threads = max(1, min(4, os.cpu_count() or 1))
        extra = json.loads(key.session_options)
        if threads is not None:
            extra["intra_op_num_threads"] = threads
        if extra:
            config.overlay(json.dumps({"model": {"decoder": {"session_options": extra}}}))
        if provider is not None and pkg.has_vision:
            # clear_providers() reaches the decoder only; the vision and embedding models
            # would still ask for the package's own provider.
            cleared: dict[str, Any] = {"session_options": {"provider_options": []}}
            parts = {p: cleared for p in ("vision", "embedding")}
            config.overlay(json.dumps({"model": parts}))
        model = og.Model(config)
        tokenizer = og.Tokenizer(model)
    except Exception as exc:  # noqa: BLE001 - OGA raises plain RuntimeError/OSError
        raise load_error(pkg, key, exc, ep) from exc
    end_ids = set(pkg.eos_token_ids)
    for marker in template.end_of_turn:
        ids = tokenizer.encode(marker)
        if len(ids) == 1:
            end_ids.add(int(ids[0]))
    try:
        end_ids.update(int(i) for i in tokenizer.eos_token_ids)
    except Exception:  # noqa: BLE001 - older OGA builds lack it
        pass
    # Generated text is decoded from the tokens' bytes where the vocabulary maps to them.
    table = token_table(pkg, tokenizer)
    seconds = time.perf_counter() - start
    device = str(getattr(model, "device_type", "") or "") or device_guess(provider, pkg.provider)
    return Loaded(model, tokenizer, frozenset(end_ids), table, seconds, device, image_marker_ids(pkg, tokenizer))


def image_marker_ids(pkg: ModelPackage, tokenizer: Any) -> frozenset[int]:
    """The ids of a vision package's image markers (none for a text package).

    A sampled ``<image_soft_token>`` reaches the embedding model on the next step as an image
    position with no image features for it, and the runtime fails there (the embedding model of
    Gemma 3 scatters one feature row to each such position); a generated ``<start_of_image>`` or
    ``<end_of_image>`` is an image tag in text that has no image. So generation never picks them.
    """
    if not pkg.has_vision:
        return frozenset()
    ids = {int(i) for i in [pkg.config["model"].get("image_token_id")] if isinstance(i, int)}
    for marker in IMAGE_MARKERS:
        encoded = tokenizer.encode(marker)
        if len(encoded) == 1:
            ids.add(int(encoded[0]))
    return frozenset(ids)


def token_table(pkg: ModelPackage, tokenizer: Any) -> TokenBytes | None:
    """The bytes of every token of ``tokenizer`` where the vocabulary maps to them and they decode as it does."""
    return TokenBytes.for_runtime(pkg.tokenizer_files, tokenizer.encode, lambda ids: tokenizer.decode(list(ids)))


def load_tokenizer(pkg: ModelPackage) -> Any | None:
    """The package's ``og.Tokenizer`` made from its configuration alone: no model is loaded.

    None on a runtime that makes a tokenizer from a loaded model only (onnxruntime-genai 0.14,
    Ryzen AI 1.8's; 0.18 makes one from the configuration). The tokenizer is the one
    :func:`load_model` loads: the runtime builds both from the same configuration.

    Raises:
        :func:`load_error`'s error for a configuration or tokenizer the runtime cannot read.
    """
    og = import_oga()
    try:
        config = og.Config(str(pkg.path))
        return og.Tokenizer(config)
    except TypeError:  # "incompatible constructor arguments": only Tokenizer(model)
        return None
    except Exception as exc:  # noqa: BLE001 - OGA raises plain RuntimeError/OSError
        raise load_error(pkg, SessionKey(str(pkg.path)), exc) from exc


_environment_checked = False


def _environment_warnings() -> list[str]:
    """What is wrong with this environment's runtimes, said at the first Ryzen AI load of a process only."""
    global _environment_checked
    if _environment_checked:
        return []
    _environment_checked = True
    return [shared.describe() for shared in shared_folders()]


def load_error(pkg: ModelPackage, key: SessionKey, exc: Exception, ep: EpSearch | None = None) -> Exception:
    """The library's error for the runtime's failure ``exc`` to load ``pkg``: what went wrong and the fix."""
    text = str(exc)
    info = runtime_info()
    if "unsupported model_type" in text.lower():
        return UnsupportedModelError(
            f"{info.describe()} does not run model.type {pkg.model_type!r} of {pkg.name}: {text}. Upgrade "
            "onnxruntime-genai (on a Ryzen AI PC: the Ryzen AI release the package was built for), or check "
            "genai_config.json.",
            path=pkg.path / "genai_config.json",
        )
    if "external data path" in text.lower():  # a data file the graph names is gone (in a cache: a link to no blob)
        return ModelPackageError(
            f"onnxruntime-genai could not load {pkg.name}: a file that holds its weights is missing ({text}). "
            f"{pkg.download_fix[0].upper()}{pkg.download_fix[1:]}.",
            path=pkg.path,
        )
    if "session_options" in text and key.session_options != "{}":
        return InvalidRequestError(
            f"onnxruntime-genai rejected the session options {key.session_options}: {text}. Use option "
            "names and value types from onnxruntime-genai's genai_config.json reference."
        )
    if pkg.layout in ("custom-ops", "vitisai"):
        return RuntimeNotAvailableError(
            f"{pkg.name} uses the Ryzen AI {'1.3-1.6 custom-ops' if pkg.layout == 'custom-ops' else '1.4 VitisAI'} "
            f"layout, which only the matching Ryzen AI runtime can load; found {info.describe()}. "
            f"Use the Ryzen AI release the package was built for, or a newer package. ({text})"
        )
    provider = key.provider
    if provider not in (None, "cpu") and ("interface not available" in text.lower() or provider in text.lower()):
        return RuntimeNotAvailableError(
            f"provider={provider!r} is not available in {info.describe()}: {text}. Install the "
            f"onnxruntime-genai build for it (e.g. onnxruntime-genai-{provider} in place of the CPU one), or "
            "use provider='cpu'"
        )
    cause = explain_ryzenai_failure(text, ep) if pkg.provider == "RyzenAI" and provider is None else None
    if cause is not None:
        return RuntimeNotAvailableError(f"loading {pkg.name} on the NPU failed: {cause}. ({text})")
    if "ryzenai" in text.lower() or "vitisai" in text.lower() or "custom op" in text.lower():
        return RuntimeNotAvailableError(
            f"loading {pkg.name} needs the Ryzen AI execution provider ({pkg.provider}), which "
            f"{info.describe()} does not have: {text}. {setup_hint(start=True)}, on a PC with the NPU driver "
            "installed; to run its weights on the CPU anyway (only plain ONNX graphs can), pass provider='cpu'."
        )
    return ModelPackageError(
        f"onnxruntime-genai ({info.describe()}) could not load {pkg.path}: {text}. Check that the "
        "package is complete (`git lfs pull`) and built for this runtime version.",
        path=pkg.path,
    )


def device_guess(provider: str | None, package_provider: str) -> str:
    """The device a model runs on, for runtimes without ``Model.device_type``: OGA's names."""
    chosen = provider or package_provider
    return {"cpu": "CPU", "dml": "DML"}.get(chosen, chosen)
