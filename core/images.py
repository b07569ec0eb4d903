"""Images in messages: from what a caller sends to bytes the runtime's image processor reads.

A message's content may hold image parts (see :class:`~ryzenai_core.messages.ChatMessage`)::

    {"type": "image", "image": b"..."}                          raw bytes of any Pillow format
    {"type": "image", "image": "photo.png"}                    a local path (str or PathLike)
    {"type": "image", "image": "file:///home/me/photo.png"}    a file URL
    {"type": "image", "image": "data:image/png;base64,..."}    a base64 data URL
    {"type": "image_url", "image_url": {"url": ...}}            OpenAI's form, same values
    {"type": "image", "url": ...} / {"type": "image", "path": ...} / {"type": "image", "data": b"..."}
    {"type": "image", "base64": "iVBOR..."} / {"type": "image", "data": "iVBOR..."}  base64 text

``http(s)`` URLs are refused: the engine never reaches the network; fetch the image first.

onnxruntime-genai's image loader reads PNG and JPEG only, and some bytes (GIF, WEBP, BMP,
TIFF, garbage) make it end the process instead of raising. So every image is decoded here
with Pillow first (the first frame of an animation; RGBA, greyscale, palette and CMYK are
converted to RGB) and handed over as PNG; what cannot be decoded is an
:class:`~ryzenai_core.errors.InvalidRequestError` naming the image and what was wrong.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import io
import os
import urllib.parse
import urllib.request
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import InvalidRequestError

__all__ = ["MAX_IMAGE_BYTES", "MAX_IMAGE_PIXELS", "PreparedImage", "image_parts", "prepare_image", "prepare_images"]

#: Largest encoded image accepted (bytes), and largest decoded image (pixels).
MAX_IMAGE_BYTES = 50 * 1024 * 1024
MAX_IMAGE_PIXELS = 40_000_000

IMAGE_TYPES = ("image", "image_url")


@dataclass(frozen=True)
class PreparedImage:
    """One decoded image: PNG bytes of its RGB pixels, and a digest of them (a cache key)."""

    png: bytes
    size: tuple[int, int]
    digest: str


def image_parts(content: Any) -> list[dict[str, Any]]:
    """The image parts of a message's content, in order."""
    if not isinstance(content, list):
        return []
    return [p for p in content if isinstance(p, dict) and p.get("type") in IMAGE_TYPES]


def _source(part: dict[str, Any], label: str) -> Any:
    """The value that says where the image is (bytes, a path, a URL)."""
    if part.get("type") == "image_url":
        inner = part.get("image_url")
        return inner.get("url") if isinstance(inner, dict) else inner
    encoded = part.get("base64")
    if encoded is None and isinstance(part.get("data"), str):
        encoded = part["data"]  # a string under "data" is base64 text (LangChain's source_type "base64")
    if isinstance(encoded, str):
        try:
            return base64.b64decode(encoded, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise InvalidRequestError(f"{label} has base64 data that is not valid ({exc})") from None
    for key in ("image", "data", "url", "path"):
        if part.get(key) is not None:
            return part[key]
    if part.get("file_id") is not None:
        raise InvalidRequestError(
            f"{label} is a file id ({part['file_id']!r}) of a provider's file store, which a local model cannot "
            "read; send the image's bytes, a local path or a data: URL"
        )
    return None


def _read_bytes(value: Any, label: str) -> bytes:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if not isinstance(value, str) or not value:
        raise InvalidRequestError(
            f"{label} has no image: give bytes, a local path, a file:// URL or a data: URL "
            f"(got {type(value).__name__})"
        )
    lowered = value[:16].lower()
    if lowered.startswith(("http://", "https://")):
        raise InvalidRequestError(
            f"{label} is a web address ({value[:80]}); the engine does not fetch from the network. "
            "Download the image first and send its bytes, a local path or a data: URL"
        )
    if lowered.startswith("data:"):
        header, _, payload = value.partition(",")
        if ";base64" not in header.lower():
            raise InvalidRequestError(f"{label} is a data: URL without ';base64'; send base64-encoded image bytes")
        try:
            return base64.b64decode(payload, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise InvalidRequestError(f"{label} is a data: URL whose base64 payload is not valid ({exc})") from None
    if lowered.startswith("file:"):
        value = urllib.request.url2pathname(urllib.parse.urlparse(value).path)
    path = Path(value).expanduser()
    if not path.is_file():
        raise InvalidRequestError(
            f"{label} names {value[:200]!r}, which is not a file (for base64 text, send a data: URL: "
            "'data:image/png;base64,...')"
        )
    size = path.stat().st_size
    if size > MAX_IMAGE_BYTES:
        raise InvalidRequestError(
            f"{label} ({path}) is {size:,} bytes, over the limit of {MAX_IMAGE_BYTES:,}; send a smaller image"
        )
    return path.read_bytes()


def prepare_image(part: dict[str, Any], label: str = "the image") -> PreparedImage:
    """Decode one image part into RGB PNG bytes the runtime's image processor reads.

    Raises:
        InvalidRequestError: no image, a web address, a missing file, bytes that are not an
            image Pillow decodes (or a truncated one), or an image over the size limits.
    """
    from PIL import Image, UnidentifiedImageError

    data = _read_bytes(_source(part, label), label)
    if not data:
        raise InvalidRequestError(f"{label} is empty (0 bytes)")
    if len(data) > MAX_IMAGE_BYTES:
        raise InvalidRequestError(
            f"{label} is {len(data):,} bytes, over the limit of {MAX_IMAGE_BYTES:,}; send a smaller image"
        )
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)  # our own limit follows
            img = Image.open(io.BytesIO(data))
        with img:
            width, height = img.size
            if width * height > MAX_IMAGE_PIXELS:
                raise InvalidRequestError(
                    f"{label} is {width}x{height} pixels, over the limit of {MAX_IMAGE_PIXELS:,} pixels; "
                    "scale it down first (the model sees 896x896)"
                )
            img.seek(0)  # the first frame of an animation
            rgb = img.convert("RGB")
    except InvalidRequestError:
        raise
    except UnidentifiedImageError:
        raise InvalidRequestError(
            f"{label} ({len(data):,} bytes starting {data[:8]!r}) is not an image format Pillow can read; "
            "send PNG, JPEG, GIF, WEBP, BMP or TIFF"
        ) from None
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as exc:
        raise InvalidRequestError(f"{label} could not be decoded ({exc}); it may be truncated or corrupt") from None
    out = io.BytesIO()
    rgb.save(out, format="PNG", compress_level=1)
    png = out.getvalue()
    return PreparedImage(png=png, size=rgb.size, digest=hashlib.sha256(rgb.tobytes()).hexdigest())


def prepare_images(contents: Sequence[tuple[int, Any]]) -> list[PreparedImage]:
    """Every image of ``(message index, content)`` pairs, in prompt order, labelled by message."""
    out: list[PreparedImage] = []
    for index, content in contents:
        parts = image_parts(content)
        for n, part in enumerate(parts):
            label = f"image {n + 1} of message #{index}" if len(parts) > 1 else f"the image of message #{index}"
            out.append(prepare_image(part, label))
    return out
