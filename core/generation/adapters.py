"""LoRA adapters on a loaded model: each file loaded once, checked by a run, set on a generator before its first token.

onnxruntime-genai runs adapters through ``og.Adapters(model)``: ``load(file, name)`` reads an
``.onnx_adapter`` file (named tensors), and ``generator.set_active_adapter(adapters, name)``
feeds its tensors to the graph inputs of the same names for that generator's whole life. At
load the runtime checks only the file's format: a tensor of another name, shape or type loads
and fails at the first run. So :class:`SessionAdapters` loads a file once per loaded model
(keyed by the file's identity: real path, size, modification time), runs one token with it set
(the one check that holds on every runtime and execution provider), and turns what the runtime
says into an :class:`~ryzenai_core.errors.AdapterError` naming the tensor, the sizes and the
fix (:func:`adapter_error`). A misfit file's error is kept for its identity: the next call
with it fails the same way without loading it again; a file rebuilt in place is loaded anew.

The runtime has no call that takes an adapter back from a generator, and one set after tokens
were appended would mix the KV of two adapters: the session sets it right after making a
generator, never on a kept one, and keys its KV cache by it (:mod:`.kv_cache`).
"""

from __future__ import annotations

import logging
import re
import threading
from typing import TYPE_CHECKING, Any

from ..adapters import ADAPTER_SUFFIX, LoraAdapter
from ..errors import AdapterError, RuntimeNotAvailableError
from ..package.runtime import runtime_info

if TYPE_CHECKING:
    from ..package.folder import ModelPackage

__all__ = ["SessionAdapters", "adapter_error", "adapter_tensors", "lora_inputs"]

log = logging.getLogger(__name__)

_DIMENSIONS = re.compile(
    r"invalid dimensions for input: (\S+) for the following indices\s+index: (\d+) Got: (\d+) Expected: (\d+)"
)
_MISMATCH = re.compile(r"running (\w+) node\. Name:'([^']+)'.*dimension mismatch", re.IGNORECASE)
_NAME = re.compile(r"Invalid input name: (\S+)")
_DTYPE = re.compile(r"Unexpected input data type\. Actual: \((tensor\(\w+\))\) , expected: \((tensor\(\w+\))\)")
_MAKE_ONE = (
    "a PEFT adapter folder (adapter_config.json, adapter_model.safetensors) is converted into one with Olive "
    "(olive convert-adapters) or onnxruntime.AdapterFormat: see docs/adapters.md"
)
_FOR_ADAPTERS = (
    "use a package built for adapters: one exported by Olive with its LoRA weights as graph inputs "
    "(olive auto-opt --adapter_path ..., or the ExtractAdapters pass), or on the NPU a Ryzen AI package made "
    "for Dynamic LoRA (Ryzen AI 1.9, Qwen text models)"
)


class SessionAdapters:
    """The adapters of one loaded model (see the module docstring)."""

    def __init__(self, package: ModelPackage) -> None:
        self.package = package
        self._runtime: Any = None
        """``og.Adapters`` of the loaded model, made when a call first chooses an adapter."""
        self._loaded: dict[tuple[str, int, int], str] = {}
        """Each loaded file's identity -> the runtime's name for it."""
        self._refused: dict[tuple[str, int, int], str] = {}
        """Each misfit file's identity -> its error's message."""
        self._count = 0
        self._lock = threading.Lock()

    def key(self, og: Any, model: Any, adapter: LoraAdapter) -> str:
        """The runtime's name of ``adapter``'s file: loaded and checked by a one-token run on first use.

        Call it where no generation runs (a session's turn on the model): the check runs the model.

        Raises:
            AdapterError: the file is no adapter, or does not fit the model (see :func:`adapter_error`).
            RuntimeNotAvailableError: onnxruntime-genai without adapters.
        """
        ident = adapter.identity
        with self._lock:
            if (key := self._loaded.get(ident)) is not None:
                return key
            if (refused := self._refused.get(ident)) is not None:
                raise AdapterError(refused)
            runtime = self._adapters(og, model)
            self._forget_older(adapter.path)
            self._count += 1
            key = f"{adapter.name}#{self._count}"
            loaded = False
            try:
                runtime.load(adapter.path, key)
                loaded = True
                _trial(og, model, runtime, key, self.package)
            except Exception as exc:  # noqa: BLE001 - OGA raises plain RuntimeError
                error = adapter_error(self.package, adapter, exc)
                self._refused[ident] = str(error)
                if loaded:
                    _unload(runtime, key)
                raise error from exc
            self._loaded[ident] = key
            log.info("%s: adapter %r loaded from %s", self.package.name, adapter.name, adapter.path)
            return key

    def activate(self, generator: Any, key: str) -> None:
        """Set the loaded adapter ``key`` on ``generator`` (a new one: before any token is appended)."""
        generator.set_active_adapter(self._runtime, key)

    def _adapters(self, og: Any, model: Any) -> Any:
        if self._runtime is None:
            if not hasattr(og, "Adapters"):
                raise RuntimeNotAvailableError(
                    f"{runtime_info().describe()} has no LoRA adapters (og.Adapters came with onnxruntime-genai 0.5); "
                    "upgrade onnxruntime-genai (on a Ryzen AI PC: a release whose runtime takes adapters), or call "
                    "without adapter"
                )
            try:
                self._runtime = og.Adapters(model)
            except Exception as exc:  # noqa: BLE001 - OGA raises plain RuntimeError
                raise AdapterError(
                    f"{runtime_info().describe()} cannot run adapters on {self.package.name}: {exc}. "
                    + (_FOR_ADAPTERS[0].upper() + _FOR_ADAPTERS[1:])
                ) from exc
        return self._runtime

    def _forget_older(self, path: str) -> None:
        """Unload earlier versions of the file at ``path`` (rebuilt in place), where no generator holds them."""
        for ident in [i for i in self._loaded if i[0] == path]:
            if _unload(self._runtime, self._loaded[ident]):
                del self._loaded[ident]
        for ident in [i for i in self._refused if i[0] == path]:
            del self._refused[ident]


def _trial(og: Any, model: Any, runtime: Any, key: str, package: ModelPackage) -> None:
    """One token through the model with adapter ``key`` set: the runtime checks its tensors only when it runs."""
    budget = package.budget
    params = og.GeneratorParams(model)
    # The runtime refuses a max_length below a sliding window baked into the graph.
    params.set_search_options(max_length=min(budget.window, max(2, package.sliding_window or 0)))
    generator = og.Generator(model, params)
    try:
        generator.set_active_adapter(runtime, key)
        generator.append_tokens([min(package.eos_token_ids, default=0)])
    finally:
        del generator


def _unload(runtime: Any, key: str) -> bool:
    """Unload ``key`` (False: the runtime refused, a generator still holds it)."""
    try:
        runtime.unload(key)
    except Exception:  # noqa: BLE001 - OGA raises plain RuntimeError
        return False
    return True


def adapter_error(package: ModelPackage, adapter: LoraAdapter, exc: Exception) -> AdapterError:
    """The :class:`~ryzenai_core.errors.AdapterError` for the runtime's failure ``exc`` to load or run ``adapter``."""
    text = " ".join(str(exc).split())
    where = f"adapter {adapter.name!r} ({adapter.path})"
    if "valid lora parameter format" in text:
        return AdapterError(f"{where} is not an onnxruntime adapter file ({ADAPTER_SUFFIX}); {_MAKE_ONE}")
    if "invalid fd" in text.lower() or "no such file" in text.lower():
        return AdapterError(f"{where} could not be read ({text}); check that the file is there and readable")
    if m := _DIMENSIONS.search(text):
        tensor, index, got, expected = m.groups()
        return AdapterError(
            f"{where} does not fit {package.name}: its tensor {tensor} has {got} at dimension {index} where the "
            f"model takes {expected}. It was made for another model (other layer sizes); make it from a fine-tune "
            "of this package's base model"
        )
    if m := _NAME.search(text):
        return AdapterError(_name_error(package, where, m.group(1)))
    if m := _MISMATCH.search(text):
        op, node = m.groups()
        return AdapterError(
            f"{where} does not fit {package.name}: the model's {op} {node} cannot multiply the adapter's tensors "
            "(the lora_A and lora_B of one projection of different ranks, or tensors made for another model); "
            "export both from the same PEFT adapter"
        )
    if m := _DTYPE.search(text):
        actual, expected = m.groups()
        tensors = adapter_tensors(adapter.path)
        wrong = [name for name, (_, dtype) in (tensors or {}).items() if dtype == actual]
        named = f" ({', '.join(wrong[:3])}{', ...' if len(wrong) > 3 else ''})" if wrong else ""
        return AdapterError(
            f"{where} does not fit {package.name}: its tensors{named} are {actual} where the model takes "
            f"{expected}; save them as {expected} (Olive's convert-adapters --dtype, or numpy's astype before "
            "onnxruntime.AdapterFormat)"
        )
    note = f" {_FOR_ADAPTERS[0].upper()}{_FOR_ADAPTERS[1:]}." if package.is_ryzenai else ""
    return AdapterError(
        f"onnxruntime-genai ({runtime_info().describe()}) could not run {package.name} with {where}: {text}.{note} "
        "`ryzenai-llm doctor MODEL --adapter FILE` checks an adapter against a package"
    )


def _name_error(package: ModelPackage, where: str, tensor: str) -> str:
    """The words for an adapter tensor the graph has no input for: a package without LoRA inputs, or another model's."""
    inputs = lora_inputs(package)
    if inputs is not None and not inputs:
        return (
            f"{package.name} has no LoRA inputs: its graph was built without them, so no adapter fits it "
            f"({where} sets {tensor}, which is no input of the model); {_FOR_ADAPTERS}"
        )
    if inputs:
        return (
            f"{where} does not fit {package.name}: its tensor {tensor} is not an input of the model, whose "
            f"{len(inputs)} LoRA inputs are named like {inputs[0]}. It was made for another model or saved under "
            "other names; convert it for this package (Olive's convert-adapters writes the names Olive's export "
            "gives the inputs)"
        )
    return (
        f"{where} does not fit {package.name}: its tensor {tensor} is not an input of the model. Either the package "
        f"was built without LoRA inputs ({_FOR_ADAPTERS}), or the adapter was made for another model or saved "
        "under other names (install onnx for a closer look)"
    )


def lora_inputs(package: ModelPackage) -> list[str] | None:
    """The decoder graph's inputs that take LoRA weights (named ``lora``, or with a default in the graph).

    None when the graph cannot be read here (the ``onnx`` package is not installed, or the file
    does not parse); read for error messages and ``doctor`` only.
    """
    try:
        import onnx
    except ImportError:
        return None
    try:
        graph = onnx.load(str(package.decoder_file), load_external_data=False).graph
    except Exception:  # noqa: BLE001 - any unreadable graph: nothing to say about it
        return None
    defaults = {i.name for i in graph.initializer}
    return [i.name for i in graph.input if "lora" in i.name.lower() or i.name in defaults]


def adapter_tensors(path: str) -> dict[str, tuple[list[int], str]] | None:
    """The tensors of an ``.onnx_adapter`` file: name -> (shape, type), read with onnxruntime's reader.

    None when onnxruntime (1.20 or later) is not installed or cannot read it; read for error
    messages and ``doctor`` only.
    """
    try:
        import onnxruntime as ort

        parameters = ort.AdapterFormat.read_adapter(path).get_parameters()
    except Exception:  # noqa: BLE001 - no reader, or not a file it reads
        return None
    return {name: (list(value.shape()), str(value.data_type())) for name, value in parameters.items()}
