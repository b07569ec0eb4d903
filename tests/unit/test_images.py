"""Images from callers: every form and format decoded with Pillow, every bad one a typed error."""

from __future__ import annotations

import base64
import copy
import io
from pathlib import Path

import numpy as np
import pytest
from PIL import ExifTags, Image

from ryzenai_core import InvalidRequestError, images
from ryzenai_core.images import InputSize, input_size, prepare_image, prepare_images


def picture(mode: str = "RGB", size: tuple[int, int] = (40, 30), fmt: str = "PNG") -> bytes:
    x, y = np.meshgrid(np.arange(size[0]), np.arange(size[1]))
    img = Image.fromarray(np.stack([(x * 7) % 256, (y * 11) % 256, (x * y) % 256], axis=-1).astype(np.uint8))
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
        # base64 wrapped at 76 columns, as `base64 cat.png` and base64.encodebytes write it
        {"type": "image", "base64": base64.encodebytes(data).decode(), "mime_type": "image/png"},
        {"type": "image", "image": "data:image/png;base64," + base64.encodebytes(data).decode()},
    ]
    digests = {prepare_image(f).digest for f in forms}
    assert len(digests) == 1
    out = prepare_image(forms[0])
    assert out.png.startswith(b"\x89PNG") and out.size == (40, 30)


@pytest.mark.parametrize(
    ("mode", "fmt"),
    [
        ("RGB", "GIF"),
        ("RGB", "WEBP"),
        ("RGB", "BMP"),
        ("RGB", "TIFF"),
        ("RGBA", "PNG"),
        ("L", "PNG"),
        ("P", "PNG"),
        ("CMYK", "JPEG"),
        ("RGB", "JPEG"),
    ],
)
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


# ---------------------------------------------------------------- forms of other providers
def test_anthropic_image_blocks_are_read(tmp_path: Path) -> None:
    data = picture()
    path = tmp_path / "cat.png"
    path.write_bytes(data)
    encoded = base64.b64encode(data).decode()
    forms = [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": encoded}},
        {"type": "image", "source": {"type": "url", "url": "data:image/png;base64," + encoded}},
        {"type": "image", "source": {"type": "url", "url": path.as_uri()}},
    ]
    assert {prepare_image(f).digest for f in forms} == {prepare_image({"type": "image", "image": data}).digest}


@pytest.mark.parametrize(
    ("part", "fragment"),
    [
        ({"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}}, "web address"),
        ({"type": "image", "source": {"type": "file", "file_id": "file_01"}}, r"file id \('file_01'\)"),
        ({"type": "image", "source_type": "id", "id": "file-9"}, r"file id \('file-9'\)"),
        ({"type": "image", "source": {"type": "base64", "data": "@@@"}}, "base64 data that is not valid"),
    ],
)
def test_other_providers_forms_that_a_local_model_cannot_read_say_why(part: dict, fragment: str) -> None:
    with pytest.raises(InvalidRequestError, match=fragment):
        prepare_image(part)


@pytest.mark.parametrize(
    "part",
    [
        {"type": "image"},
        {"type": "image", "source": {"type": "text", "data": "hello"}},
        {"type": "image", "source": {"kind": "base64"}},
        {"type": "image", "img": "cat.png"},
        {"type": "image", "id": "lc_123"},  # a LangChain block id, not a file id
        {"type": "image_url", "image_url": {"href": "cat.png"}},
    ],
)
def test_an_unknown_form_is_named_with_the_forms_accepted(part: dict) -> None:
    with pytest.raises(InvalidRequestError) as info:
        prepare_images([(2, [part])])
    message = str(info.value)
    assert "the image of message #2 is an image part of a form this library does not know" in message
    assert "'source': {'type': 'base64', 'media_type'" in message and "'image_url': {'url'" in message
    assert "NoneType" not in message


# ---------------------------------------------------------------- the model's input size
GEMMA3_PROCESSOR = {
    "processor": {
        "name": "gemma_3_image_processing",
        "transforms": [
            {"operation": {"name": "decode_image", "type": "DecodeImage", "attrs": {"color_space": "RGB"}}},
            {
                "operation": {
                    "name": "resize",
                    "type": "Resize",
                    "attrs": {"interpolation": "CUBIC", "width": 896, "height": 896, "keep_aspect_ratio": 0},
                }
            },
            {"operation": {"name": "re-scale", "type": "Rescale"}},
        ],
    }
}


def test_the_input_size_is_read_from_the_image_pipeline() -> None:
    assert input_size(GEMMA3_PROCESSOR) == InputSize(896, 896, "BICUBIC")
    keeps_aspect = copy.deepcopy(GEMMA3_PROCESSOR)
    keeps_aspect["processor"]["transforms"][1]["operation"]["attrs"]["keep_aspect_ratio"] = 1
    no_resize = {"processor": {"transforms": [GEMMA3_PROCESSOR["processor"]["transforms"][0]]}}
    for config in (keeps_aspect, no_resize, {}, {"processor": {"transforms": "x"}}):
        assert input_size(config) is None


@pytest.mark.parametrize(
    ("size", "expected"), [((1200, 1000), (896, 896)), ((3000, 200), (896, 200)), ((300, 1200), (300, 896))]
)
def test_a_large_image_is_scaled_down_to_the_input_size(size: tuple[int, int], expected: tuple[int, int]) -> None:
    out = prepare_image({"type": "image", "image": picture(size=size)}, size=InputSize(896, 896))
    assert out.size == expected
    assert Image.open(io.BytesIO(out.png)).size == expected


def test_a_small_image_is_sent_as_it_is() -> None:
    data = picture()
    assert prepare_image({"type": "image", "image": data}, size=InputSize(896, 896)) == prepare_image(
        {"type": "image", "image": data}
    )


def test_the_digest_is_of_what_the_model_gets() -> None:
    big = prepare_image({"type": "image", "image": picture(size=(1000, 1000))}, size=InputSize(896, 896))
    small = Image.open(io.BytesIO(big.png))
    out = io.BytesIO()
    small.save(out, format="BMP")
    assert prepare_image({"type": "image", "image": out.getvalue()}).digest == big.digest
    # the same pixel bytes in another shape are another image
    flat = Image.frombytes("RGB", (4, 6), bytes(range(72)))
    tall = Image.frombytes("RGB", (6, 4), bytes(range(72)))
    digests = set()
    for img in (flat, tall):
        buf = io.BytesIO()
        img.save(buf, format="PNG")
        digests.add(prepare_image({"type": "image", "image": buf.getvalue()}).digest)
    assert len(digests) == 2


def test_a_phone_photo_is_turned_upright() -> None:
    img = Image.new("RGB", (60, 40), (255, 0, 0))
    img.paste((0, 0, 255), (0, 0, 30, 40))  # left half blue
    exif = Image.Exif()
    exif[ExifTags.Base.Orientation] = 6  # the camera was turned: show it rotated 90 degrees clockwise
    out = io.BytesIO()
    img.save(out, format="JPEG", exif=exif, quality=95)
    upright = Image.open(io.BytesIO(prepare_image({"type": "image", "image": out.getvalue()}).png))
    assert upright.size == (40, 60)
    top = upright.getpixel((20, 5))
    assert top[2] > 200 and top[0] < 60  # the blue half is now on top


def test_a_jpeg_over_the_pixel_limit_is_decoded_at_a_reduced_scale(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(images, "MAX_IMAGE_PIXELS", 1_000_000)
    jpeg = {"type": "image", "image": picture(size=(1600, 1200), fmt="JPEG")}  # 1.9 MP
    assert prepare_image(jpeg).size == (800, 600)  # decoded at 1/2: the first scale under the limit
    assert prepare_image(jpeg, size=InputSize(224, 224)).size == (224, 224)  # at 1/4: still over the input size
    with pytest.raises(InvalidRequestError, match="1600x1200 pixels, over the limit of 1,000,000 pixels to decode"):
        prepare_image({"type": "image", "image": picture(size=(1600, 1200), fmt="PNG")}, size=InputSize(224, 224))
