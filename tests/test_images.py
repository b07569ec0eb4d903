"""Images from callers: every form and format decoded with Pillow, every bad one a typed error."""

from __future__ import annotations

import base64
import io
from pathlib import Path

import pytest
from PIL import Image

from ryzenai_core import InvalidRequestError
from ryzenai_core.images import prepare_image, prepare_images


def picture(mode: str = "RGB", size: tuple[int, int] = (40, 30), fmt: str = "PNG") -> bytes:
    img = Image.new("RGB", size)
    for x in range(size[0]):
        for y in range(size[1]):
            img.putpixel((x, y), ((x * 7) % 256, (y * 11) % 256, (x * y) % 256))
    if mode != "RGB":
        img = img.convert(mode)
    out = io.BytesIO()
    img.save(out, format=fmt)
    return out.getvalue()


def test_every_form_of_the_same_image_gives_the_same_pixels(tmp_path: Path) -> None:
    data = picture()
    path = tmp_path / "cat.png"
    path.write_bytes(data)
    url = "data:image/png;base64," + base64.b64encode(data).decode()
    forms = [
        {"type": "image", "image": data},
        {"type": "image", "image": str(path)},
        {"type": "image", "image": path},
        {"type": "image", "image": path.as_uri()},
        {"type": "image", "image": url},
        {"type": "image_url", "image_url": {"url": url}},
        {"type": "image", "url": url},
        {"type": "image", "path": str(path)},
        {"type": "image", "data": data},
        {"type": "image", "base64": base64.b64encode(data).decode(), "mime_type": "image/png"},
        {"type": "image", "source_type": "base64", "data": base64.b64encode(data).decode(), "mime_type": "image/png"},
    ]
    digests = {prepare_image(f).digest for f in forms}
    assert len(digests) == 1
    out = prepare_image(forms[0])
    assert out.png.startswith(b"\x89PNG") and out.size == (40, 30)


@pytest.mark.parametrize(("mode", "fmt"), [("RGB", "GIF"), ("RGB", "WEBP"), ("RGB", "BMP"), ("RGB", "TIFF"),
                                           ("RGBA", "PNG"), ("L", "PNG"), ("P", "PNG"), ("CMYK", "JPEG"), ("RGB", "JPEG")])
def test_formats_the_runtime_cannot_read_are_converted_to_rgb_png(mode: str, fmt: str) -> None:
    out = prepare_image({"type": "image", "image": picture(mode, fmt=fmt)})
    assert out.png.startswith(b"\x89PNG")
    assert Image.open(io.BytesIO(out.png)).mode == "RGB"


def test_lossless_formats_keep_the_pixels() -> None:
    digests = {prepare_image({"type": "image", "image": picture(fmt=fmt)}).digest for fmt in ("PNG", "BMP", "TIFF")}
    assert len(digests) == 1


def test_an_animation_uses_its_first_frame() -> None:
    frames = [Image.new("RGB", (8, 8), c) for c in ((255, 0, 0), (0, 255, 0))]
    out = io.BytesIO()
    frames[0].save(out, format="GIF", save_all=True, append_images=frames[1:])
    first = prepare_image({"type": "image", "image": out.getvalue()})
    assert Image.open(io.BytesIO(first.png)).getpixel((0, 0)) == (255, 0, 0)


@pytest.mark.parametrize(
    ("value", "fragments"),
    [
        (b"definitely not an image", ["not an image format Pillow can read", "b'definite'"]),
        (picture()[:60], ["could not be decoded", "truncated"]),
        (b"", ["is empty"]),
        ("https://example.com/cat.png", ["web address", "Download the image first"]),
        ("http://example.com/cat.png", ["web address"]),
        ("/no/such/cat.png", ["not a file", "data: URL"]),
        ("data:image/png;base64,@@@", ["base64 payload is not valid"]),
        ("data:image/png,rawtext", ["without ';base64'"]),
        (12, ["no image", "int"]),
    ],
)
def test_bad_images_are_typed_errors_naming_the_image(value, fragments) -> None:
    with pytest.raises(InvalidRequestError) as info:
        prepare_images([(0, [{"type": "text", "text": "look"}, {"type": "image", "image": value}])])
    message = str(info.value)
    assert "the image of message #0" in message
    for fragment in fragments:
        assert fragment in message, (fragment, message)


def test_too_many_pixels_is_refused_before_decoding() -> None:
    big = io.BytesIO()
    Image.new("1", (8000, 6000)).save(big, format="PNG")
    with pytest.raises(InvalidRequestError, match="8000x6000 pixels, over the limit of 40,000,000 pixels"):
        prepare_image({"type": "image", "image": big.getvalue()})


def test_two_images_in_one_message_are_labelled_by_position() -> None:
    parts = [{"type": "image", "image": picture()}, {"type": "image", "image": b"junk"}]
    with pytest.raises(InvalidRequestError, match="image 2 of message #3"):
        prepare_images([(3, parts)])


def test_a_provider_file_id_is_refused() -> None:
    with pytest.raises(InvalidRequestError, match=r"file id \('file-abc'\) of a provider's file store"):
        prepare_image({"type": "image", "file_id": "file-abc"})
