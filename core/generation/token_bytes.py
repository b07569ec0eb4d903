"""The bytes of every token, read once from a package's ``tokenizer.json``.

onnxruntime-genai's decode returns a C string built from valid UTF-8: it ends at a generated
NUL and drops everything after bytes that are not valid UTF-8 (a token sampled in the middle
of a character, a character never completed). Generated text is therefore decoded here, from
the tokens' own bytes: invalid bytes become U+FFFD and nothing after them is lost.

Two vocabularies are mapped:

* byte-level BPE (Llama 3, Qwen, GPT-2 style): each vocabulary entry spells its bytes in
  GPT-2's byte-to-unicode alphabet;
* SentencePiece-style BPE with byte fallback (Gemma): ``<0xNN>`` is one byte and ``▁`` a space,
  when the decoder does no more than that (no stripped leading space).

An added token is its own text; a special one is no text (the runtime skips special tokens).
Any other tokenizer, or one whose mapping does not reproduce the runtime's decode of a probe
text, is decoded by the runtime.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

__all__ = ["PROBE_TEXT", "TokenBytes", "byte_zero_token"]

#: Text whose runtime decode a mapping must reproduce before it is used.
PROBE_TEXT = 'Hello, world! 42 < 7\n\tdéjà vu — 混合推理 🚀 한국어 {"k": [1]}'


def _gpt2_unicode_to_byte() -> dict[str, int]:
    """GPT-2's byte-level alphabet, reversed: the character that spells each byte."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    codes = list(keep)
    shifted = 0
    for b in range(256):
        if b not in keep:
            keep.append(b)
            codes.append(256 + shifted)
            shifted += 1
    return {chr(c): b for b, c in zip(keep, codes, strict=True)}


_GPT2_BYTE_ZERO = next(c for c, b in _gpt2_unicode_to_byte().items() if b == 0)  # "Ā"


def _steps(decoder: Any) -> list[dict[str, Any]]:
    if not isinstance(decoder, dict):
        return []
    if decoder.get("type") == "Sequence":
        return [s for s in decoder.get("decoders") or [] if isinstance(s, dict)]
    return [decoder]


def _is_metaspace_replace(step: dict[str, Any]) -> bool:
    pattern = step.get("pattern")
    return (
        step.get("type") == "Replace"
        and isinstance(pattern, dict)
        and pattern.get("String") == "\u2581"
        and step.get("content") == " "
    )


class TokenBytes:
    """Token id -> bytes for a byte-level or byte-fallback vocabulary.

    Attributes:
        table: the bytes of each id (ids beyond it, or unused, are ``b""``).
    """

    __slots__ = ("table",)

    def __init__(self, table: Sequence[bytes]) -> None:
        self.table = list(table)

    @classmethod
    def from_tokenizer_json(cls, path: str | Path) -> TokenBytes | None:
        """The table of ``tokenizer.json`` at ``path``, or None for a vocabulary it cannot map."""
        try:
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
        except (OSError, ValueError):
            return None
        model = data.get("model") if isinstance(data, dict) else None
        if not isinstance(model, dict) or model.get("type") != "BPE" or not isinstance(model.get("vocab"), dict):
            return None
        steps = _steps(data.get("decoder"))
        kinds = [s.get("type") for s in steps]
        by_id: dict[int, bytes] = {}
        if kinds and all(k == "ByteLevel" for k in kinds):
            u2b = _gpt2_unicode_to_byte()
            for piece, i in model["vocab"].items():
                if not isinstance(i, int) or any(c not in u2b for c in piece):
                    return None
                by_id[i] = bytes(u2b[c] for c in piece)
        elif (
            model.get("byte_fallback")
            and "ByteFallback" in kinds
            and all(s.get("type") in ("ByteFallback", "Fuse") or _is_metaspace_replace(s) for s in steps)
        ):
            for piece, i in model["vocab"].items():
                if not isinstance(i, int):
                    return None
                if len(piece) == 6 and piece.startswith("<0x") and piece.endswith(">"):
                    try:
                        by_id[i] = bytes([int(piece[3:5], 16)])
                    except ValueError:
                        return None
                else:
                    by_id[i] = piece.replace("\u2581", " ").encode("utf-8")
        else:
            return None
        for added in data.get("added_tokens") or []:
            if isinstance(added, dict) and isinstance(added.get("id"), int) and isinstance(added.get("content"), str):
                by_id[added["id"]] = b"" if added.get("special") else added["content"].encode("utf-8")
        if not by_id or min(by_id) < 0:
            return None
        table = [b""] * (max(by_id) + 1)
        for i, b in by_id.items():
            table[i] = b
        return cls(table)

    @classmethod
    def for_runtime(
        cls,
        tokenizer_files: Sequence[Any],
        encode: Callable[[str], Sequence[int]],
        runtime_decode: Callable[[Sequence[int]], str],
    ) -> TokenBytes | None:
        """The package's table if it decodes :data:`PROBE_TEXT` exactly as the runtime does."""
        path = next((p for p in tokenizer_files if getattr(p, "name", "") == "tokenizer.json"), None)
        table = cls.from_tokenizer_json(path) if path is not None else None
        if table is None:
            return None
        try:
            ids = [int(i) for i in encode(PROBE_TEXT)]
            expected = str(runtime_decode(ids))
        except Exception:  # noqa: BLE001 - a runtime that cannot decode the probe: keep its decode
            return None
        return table if ids and table.decode(ids) == expected else None

    def bytes_of(self, ids: Sequence[int]) -> bytes:
        """The bytes of ``ids`` joined."""
        table, n = self.table, len(self.table)
        return b"".join(table[i] if 0 <= i < n else b"" for i in ids)

    def decode(self, ids: Sequence[int]) -> str:
        """Text of ``ids``: their bytes as UTF-8, each invalid byte sequence as U+FFFD."""
        return self.bytes_of(ids).decode("utf-8", errors="replace")


def byte_zero_token(tokenizer_files: Sequence[Any]) -> int | None:
    """The vocabulary's token for byte 0 (byte-level BPE ``Ā``, byte fallback ``<0x00>``), if any.

    Found for any byte-level or byte-fallback vocabulary, also one whose decoder
    :class:`TokenBytes` does not map (the prompt's NULs are encoded as this token).
    """
    for path in tokenizer_files:
        if getattr(path, "name", "") != "tokenizer.json":
            continue
        try:
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
        except (OSError, ValueError):
            return None
        model = data.get("model") or {}
        vocab = model.get("vocab")
        if not isinstance(vocab, dict):
            return None
        names = []
        if model.get("byte_fallback"):
            names.append("<0x00>")
        if "ByteLevel" in json.dumps([data.get("pre_tokenizer"), data.get("decoder")]):
            names.append(_GPT2_BYTE_ZERO)
        for name in names:
            if isinstance(vocab.get(name), int):
                return int(vocab[name])
    return None
