"""A byte-level reference decode, built straight from a package's tokenizer.json.

Each token is its bytes (GPT-2's byte-to-unicode map for byte-level BPE; ``<0xNN>`` and
``▁`` as a space for SentencePiece byte fallback; an added token is its own text, a special
one nothing, as the runtime skips special tokens). The text of ids is their bytes joined and
decoded with ``errors="replace"``: an invalid byte becomes U+FFFD and nothing after it is lost.
"""

from __future__ import annotations

import json
from pathlib import Path


def _gpt2_unicode_to_byte() -> dict[str, int]:
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars = list(printable)
    extra = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + extra)
            extra += 1
    return {chr(c): b for b, c in zip(printable, chars, strict=True)}


def token_bytes(folder: Path) -> dict[int, bytes]:
    data = json.loads((Path(folder) / "tokenizer.json").read_text(encoding="utf-8"))
    model = data["model"]
    u2b = _gpt2_unicode_to_byte()
    out: dict[int, bytes] = {}
    for piece, i in model["vocab"].items():
        if model.get("byte_fallback"):
            if len(piece) == 6 and piece.startswith("<0x") and piece.endswith(">"):
                out[i] = bytes([int(piece[3:5], 16)])
            else:
                out[i] = piece.replace("\u2581", " ").encode()
        else:
            out[i] = bytes(u2b[c] for c in piece)
    for added in data.get("added_tokens", []):
        out[added["id"]] = b"" if added.get("special") else added["content"].encode()
    return out


def reference_decode(table: dict[int, bytes], ids: list[int]) -> str:
    return b"".join(table.get(i, b"") for i in ids).decode("utf-8", errors="replace")
