"""Images in messages: from what a caller sends to bytes the runtime's image processor reads.

A message's content may hold image parts (see :class:`~ryzenai_core.messages.ChatMessage`)::

    {"type": "image", "image": b"..."}                          raw bytes of any Pillow format
    {"type": "image", "image": "photo.png"}                    a local path (str or PathLike)
    {"type": "image", "image": "file:///home/me/photo.png"}    a file URL
    {"type": "image", "image": "data:image/png;base64,..."}    a base64 data URL
    {"type": "image_url", "image_url": {"url": ...}}            OpenAI's form, same values
    {"type": "image", "url": ...} / {"type": "image", "path": ...} / {"type": "image", "data": b"..."}
    {"type": "image", "base64": "iVBOR..."} / {"type": "image", "data": "iVBOR..."}  base64 text
    {"type": "image", "source": {"type": "base64", "media_type": ..., "data": ...}}  Anthropic's form
    {"type": "image", "source": {"type": "url", "url": ...}}

``http(s)`` URLs are refused: the engine never reaches the network; fetch the image first.
A file id of a provider's file store (``file_id``, LangChain's ``source_type="id"``,
Anthropic's ``source.type="file"``) is refused too: a local model cannot read it.

onnxruntime-genai's image loader reads PNG and JPEG only, and some bytes (GIF, WEBP, BMP,
TIFF, garbage) make it end the process instead of raising. So every image is decoded here
with Pillow first (the first frame of an animation, turned upright as its EXIF orientation
says; RGBA, greyscale, palette and CMYK are converted to RGB) and handed over as PNG; what
cannot be decoded is an :class:`~ryzenai_core.errors.InvalidRequestError` naming the image and
what was wrong.

An image larger than the model's input (:func:`input_size`: 896x896 for Gemma 3) is scaled
down here to that size, with the resampling the runtime's own Resize step uses, so the runtime
gets the same pixels it would have computed from the full image while a 24 MP photo is
PNG-encoded (and decoded again by the runtime) at 0.8 MP. :data:`MAX_IMAGE_PIXELS` bounds
the pixels decoded (memory), checked from the header before decoding: a larger JPEG is
decoded at a reduced scale (libjpeg's DCT scaling) instead of being refused; another format
that large is refused.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import io
import json
import os
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from .errors import InvalidRequestError

__all__ = [
    "MAX_IMAGE_BYTES",
    "MAX_IMAGE_PIXELS",
    "InputSize",
    "PreparedImage",
    "image_parts",
    "input_size",
    "prepare_image",
    "read_input_size",
    "prepare_images",
]

#: Largest encoded image accepted (bytes), and most pixels decoded (3 bytes each in RGB).
MAX_IMAGE_BYTES = 50 * 1024 * 1024
MAX_IMAGE_PIXELS = 40_000_000

IMAGE_TYPES = ("image", "image_url")

#: The forms of an image part, for the message that refuses an unknown one.
ACCEPTED_FORMS = (
    "{'type': 'image', 'image': <bytes, a path, a file: or data: URL>}",
    "{'type': 'image', 'base64': ..., 'mime_type': ...}",
    "{'type': 'image', 'url': ...} or {'type': 'image', 'path': ...}",
    "{'type': 'image', 'source_type': 'base64', 'data': ...}",
    "{'type': 'image', 'source': {'type': 'base64', 'media_type': ..., 'data': ...}} (or source type 'url')",
    "{'type': 'image_url', 'image_url': {'url': ...}} (or the URL as a string)",
)

# ort-extensions' Resize interpolation names, as Pillow filters (its results match Pillow's).
_RESAMPLING = {"CUBIC": "BICUBIC", "LINEAR": "BILINEAR", "NEAREST": "NEAREST"}


@dataclass(frozen=True)
class PreparedImage:
    """One decoded image: PNG bytes of the RGB pixels the runtime gets, their size and digest.

    ``digest`` covers the size and the pixels handed over (after any downscale): two images
    that reach the model as the same pixels share it, which makes it the KV cache's key.
    """

    png: bytes
    size: tuple[int, int]
    digest: str


@dataclass(frozen=True)
class InputSize:
    """The size the runtime's image pipeline resizes every image to, and how it resamples."""

    width: int
    height: int
    resampling: str = "BICUBIC"


def input_size(processor_config: Mapping[str, Any]) -> InputSize | None:
    """The fixed input size of an ort-extensions image pipeline (``processor_config.json``).

    The size of its ``Resize`` step when that step stretches every image to width x height
    (``keep_aspect_ratio`` off, as Gemma 3's 896x896); None for any other pipeline (no fixed
    size, or one that keeps the aspect ratio), whose images are sent at their own size.
    """
    processor = processor_config.get("processor")
    transforms = processor.get("transforms") if isinstance(processor, Mapping) else None
    for step in transforms if isinstance(transforms, list) else []:
        operation = step.get("operation") if isinstance(step, Mapping) else None
        if not isinstance(operation, Mapping) or operation.get("type") != "Resize":
            continue
        attrs = operation.get("attrs")
        if not isinstance(attrs, Mapping) or attrs.get("keep_aspect_ratio", 1):
            return None
        width, height = attrs.get("width"), attrs.get("height")
        resampling = _RESAMPLING.get(str(attrs.get("interpolation", "CUBIC")).upper())
        if not (isinstance(width, int) and isinstance(height, int) and width > 0 and height > 0 and resampling):
            return None
        return InputSize(width, height, resampling)
    return None


def read_input_size(path: str | os.PathLike[str] | None) -> InputSize | None:
    """:func:`input_size` of a ``processor_config.json`` file (None when it is missing or unreadable)."""
    if path is None:
        return None
    try:
        config = json.loads(Path(path).read_bytes())
    except (OSError, ValueError):
        return None  # the runtime reports a broken pipeline itself when it loads it
    return input_size(config) if isinstance(config, Mapping) else None


def image_parts(content: Any) -> list[dict[str, Any]]:
    """The image parts of a message's content, in order."""
    if not isinstance(content, list):
        return []
    return [p for p in content if isinstance(p, dict) and p.get("type") in IMAGE_TYPES]


def _b64decode(text: str) -> bytes:
    """Strict base64, except for line breaks and spaces (``base64 photo.jpg`` wraps its output at 76 columns).

    Raises:
        binascii.Error: a character outside the base64 alphabet, or bad padding.
    """
    return base64.b64decode("".join(text.split()), validate=True)


def _base64(encoded: Any, label: str) -> bytes:
    if not isinstance(encoded, str):
        raise InvalidRequestError(f"{label} has base64 data of type {type(encoded).__name__}; send base64 text")
    try:
        return _b64decode(encoded)
    except (binascii.Error, ValueError) as exc:
        raise InvalidRequestError(f"{label} has base64 data that is not valid ({exc})") from None


def _file_id(file_id: Any, label: str) -> InvalidRequestError:
    return InvalidRequestError(
        f"{label} is a file id ({file_id!r}) of a provider's file store, which a local model cannot "
        "read; send the image's bytes, a local path or a data: URL"
    )


def _unknown_form(part: Mapping[str, Any], label: str) -> InvalidRequestError:
    keys = ", ".join(repr(k) for k in part)
    source = part.get("source")
    if isinstance(source, Mapping):
        keys += f"; source {{{', '.join(repr(k) for k in source)}}} of type {source.get('type')!r}"
    return InvalidRequestError(
        f"{label} is an image part of a form this library does not know (keys {keys}); send one of: "
        + "; ".join(ACCEPTED_FORMS)
    )


def _source(part: dict[str, Any], label: str) -> Any:
    """The value that says where the image is (bytes, a path, a URL).

    Raises:
        InvalidRequestError: invalid base64 data, a provider's file id, or a form with none of
            the keys of :data:`ACCEPTED_FORMS`.
    """
    if part.get("type") == "image_url":
        inner = part.get("image_url")
        value = inner.get("url") if isinstance(inner, Mapping) else inner
        if value is None:
            raise _unknown_form(part, label)
        return value
    source = part.get("source")
    if isinstance(source, Mapping):  # Anthropic's form
        kind = source.get("type")
        if kind == "base64" and "data" in source:
            return _base64(source["data"], label)
        if kind == "url" and source.get("url") is not None:
            return source["url"]
        if kind == "file":
            raise _file_id(source.get("file_id"), label)
        raise _unknown_form(part, label)
    encoded = part.get("base64")
    if encoded is None and isinstance(part.get("data"), str):
        encoded = part["data"]  # a string under "data" is base64 text (LangChain's source_type "base64")
    if encoded is not None:
        return _base64(encoded, label)
    for key in ("image", "data", "url", "path"):
        if part.get(key) is not None:
            return part[key]
    if part.get("file_id") is not None:
        raise _file_id(part["file_id"], label)
    if part.get("source_type") == "id" and part.get("id") is not None:  # LangChain's older form of a file id
        raise _file_id(part["id"], label)
    raise _unknown_form(part, label)


def _read_bytes(value: Any, label: str) -> bytes:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if not isinstance(value, str) or not value:
        raise InvalidRequestError(
            f"{label} has no image: give bytes, a local path, a file:// URL or a data: URL (got {type(value).__name__})"
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
            return _b64decode(payload)
        except (binascii.Error, ValueError) as exc:
            raise InvalidRequestError(f"{label} is a data: URL whose base64 payload is not valid ({exc})") from None
    if lowered.startswith("file:"):
        # Imported here: urllib.request brings http.client and ssl (~20-35 ms), for file: URLs only.
        from urllib.request import url2pathname  # noqa: PLC0415

        value = url2pathname(urlparse(value).path)
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


def _draft_scale(width: int, height: int, size: InputSize | None) -> int:
    """The JPEG decode scale (1/2, 1/4 or 1/8) that brings an image under :data:`MAX_IMAGE_PIXELS`.

    The smallest such reduction, or a larger one that still leaves the image at least the
    model's input size.
    """
    scale = next((s for s in (2, 4, 8) if -(-width // s) * -(-height // s) <= MAX_IMAGE_PIXELS), 8)
    if size is not None:
        scale = max([scale] + [s for s in (2, 4, 8) if width // s >= size.width and height // s >= size.height])
    return scale


def _over_limit(label: str, width: int, height: int) -> InvalidRequestError:
    return InvalidRequestError(
        f"{label} is {width}x{height} pixels, over the limit of {MAX_IMAGE_PIXELS:,} pixels to decode (only a "
        "JPEG that large is decoded at a reduced scale); scale it down first, or send it as JPEG"
    )


def prepare_image(part: dict[str, Any], label: str = "the image", size: InputSize | None = None) -> PreparedImage:
    """Decode one image part into RGB PNG bytes the runtime's image processor reads.

    Args:
        part: the image part (see the module docstring for its forms).
        label: how messages name the image.
        size: the model's input size (:func:`input_size`); an image larger than it, in either
            dimension, is scaled down to it in that dimension, with the runtime's resampling.
            None: the image is sent at its own size.

    Raises:
        InvalidRequestError: an image part of an unknown form, a web address or file id, a
            missing file, bytes that are not an image Pillow decodes (or a truncated one), or an
            image over the size limits.
    """
    from PIL import ExifTags, Image, ImageOps, UnidentifiedImageError

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
                scale = _draft_scale(width, height, size)
                img.draft("RGB", (width // scale, height // scale))  # JPEG only: the others keep their size
                if img.size[0] * img.size[1] > MAX_IMAGE_PIXELS:
                    raise _over_limit(label, width, height)
            img.seek(0)  # the first frame of an animation
            frame: Image.Image = img
            if img.getexif().get(ExifTags.Base.Orientation, 1) != 1:
                frame = ImageOps.exif_transpose(img)  # a phone photo as it was taken, as transformers reads it
            rgb = frame.convert("RGB")
    except InvalidRequestError:
        raise
    except Image.DecompressionBombError as exc:  # Pillow's own guard, far above ours: not even opened
        raise InvalidRequestError(f"{label} is too large to open ({exc}); scale it down first") from None
    except UnidentifiedImageError:
        raise InvalidRequestError(
            f"{label} ({len(data):,} bytes starting {data[:8]!r}) is not an image format Pillow can read; "
            "send PNG, JPEG, GIF, WEBP, BMP or TIFF"
        ) from None
    except (OSError, ValueError, SyntaxError) as exc:
        raise InvalidRequestError(f"{label} could not be decoded ({exc}); it may be truncated or corrupt") from None
    if size is not None:
        fitted = (min(rgb.width, size.width), min(rgb.height, size.height))
        if fitted != rgb.size:
            rgb = rgb.resize(fitted, Image.Resampling[size.resampling])
    out = io.BytesIO()
    rgb.save(out, format="PNG", compress_level=1)
    digest = hashlib.sha256(f"{rgb.width}x{rgb.height}:".encode())
    digest.update(rgb.tobytes())
    return PreparedImage(png=out.getvalue(), size=rgb.size, digest=digest.hexdigest())


def prepare_images(contents: Sequence[tuple[int, Any]], size: InputSize | None = None) -> list[PreparedImage]:
    """Every image of ``(message index, content)`` pairs, in prompt order, labelled by message.

    Args:
        contents: each message's index and content.
        size: the model's input size (see :func:`prepare_image`).
    """
    out: list[PreparedImage] = []
    for index, content in contents:
        parts = image_parts(content)
        for n, part in enumerate(parts):
            label = f"image {n + 1} of message #{index}" if len(parts) > 1 else f"the image of message #{index}"
            out.append(prepare_image(part, label, size))
    return out
