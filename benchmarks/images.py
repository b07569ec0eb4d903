"""Preparing a 24 MP photo for Gemma 3: at full size vs scaled down to the model's input first.

    python benchmarks/images.py [--rounds 5] [--json benchmarks/results/images.json]

The image is a synthetic 6000x4000 photo (smooth gradients with sensor-like noise), sent as
JPEG and as PNG. Each round prepares it both ways, one after the other (the order alternates):

- ``full size``: decoded, converted to RGB and PNG-encoded at 6000x4000, as every image was
  before the downscale (``prepare_image`` without an input size);
- ``downscaled``: scaled down to 896x896 (the tiny Gemma 3 fixture's ``processor_config.json``)
  with the runtime's resampling, then PNG-encoded (``prepare_image(..., size=...)``).

Each is timed on the host (``prepare``) and then through onnxruntime-genai's image processor
(``processor``: its PNG decode, resize and normalisation), and the pixel values the processor
produces are compared (the same within float rounding: the host's resize is the runtime's). The
figure is the median over the rounds; the ratio is full size / downscaled in the same round.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run from a source checkout without installing
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import onnxruntime_genai as og  # noqa: E402
from PIL import Image  # noqa: E402

from ryzenai_core.images import prepare_image, read_input_size  # noqa: E402

VISION = ROOT / "tests" / "fixtures" / "models" / "tiny-gemma3-vision"
PROMPT = "<start_of_image>"


def photo(width: int = 6000, height: int = 4000) -> Image.Image:
    """Smooth colour gradients with Gaussian noise (sigma 6), about as compressible as a photo."""
    rng = np.random.default_rng(0)
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    base = np.stack([x / width * 200 + 30, y / height * 180 + 40, (np.sin(x / 300) + np.cos(y / 200)) * 60 + 120], -1)
    noisy = base + rng.normal(0, 6, base.shape).astype(np.float32)
    return Image.fromarray(np.clip(noisy, 0, 255).astype(np.uint8))


def encoded(img: Image.Image, fmt: str) -> bytes:
    out = io.BytesIO()
    img.save(out, format=fmt, quality=90) if fmt == "JPEG" else img.save(out, format=fmt, compress_level=6)
    return out.getvalue()


def run(data: bytes, size: Any, processor: Any) -> dict[str, Any]:
    t0 = time.perf_counter()
    prepared = prepare_image({"type": "image", "image": data}, size=size)
    t1 = time.perf_counter()
    inputs = processor(PROMPT, images=og.Images.open_bytes(prepared.png))
    pixels = inputs["pixel_values"].as_numpy().copy()
    t2 = time.perf_counter()
    return {"prepare": t1 - t0, "processor": t2 - t1, "png_bytes": len(prepared.png), "pixels": pixels}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()

    size = read_input_size(VISION / "processor_config.json")
    processor = og.Model(str(VISION)).create_multimodal_processor()
    img = photo()
    report: dict[str, Any] = {
        "image": f"{img.width}x{img.height}",
        "input_size": f"{size.width}x{size.height}" if size else None,
        "rounds": args.rounds,
        "load_average": os.getloadavg()[:2],
        "formats": {},
    }
    for fmt in ("JPEG", "PNG"):
        data = encoded(img, fmt)
        rows: dict[str, list[dict[str, Any]]] = {"full size": [], "downscaled": []}
        for n in range(args.rounds):
            order = [("full size", None), ("downscaled", size)]
            for name, target in order if n % 2 == 0 else order[::-1]:
                rows[name].append(run(data, target, processor))
        pairs = list(zip(rows["full size"], rows["downscaled"], strict=True))
        same = max(float(np.abs(f["pixels"] - d["pixels"]).max()) for f, d in pairs)
        result: dict[str, Any] = {"input_bytes": len(data), "max_pixel_value_difference": same}
        for name, runs in rows.items():
            result[name] = {
                "prepare_ms": statistics.median(r["prepare"] for r in runs) * 1000,
                "processor_ms": statistics.median(r["processor"] for r in runs) * 1000,
                "png_bytes": runs[0]["png_bytes"],
            }
        totals = [(f["prepare"] + f["processor"]) / (d["prepare"] + d["processor"]) for f, d in pairs]
        result["prepare_ratio"] = statistics.median(f["prepare"] / d["prepare"] for f, d in pairs)
        result["total_ratio"] = statistics.median(totals)
        result["total_ratio_range"] = [min(totals), max(totals)]
        report["formats"][fmt] = result
        full, down = result["full size"], result["downscaled"]
        print(
            f"{fmt} ({len(data) / 1e6:.1f} MB): full size {full['prepare_ms']:.0f} ms + processor "
            f"{full['processor_ms']:.0f} ms (PNG {full['png_bytes'] / 1e6:.1f} MB); downscaled "
            f"{down['prepare_ms']:.0f} ms + {down['processor_ms']:.0f} ms (PNG {down['png_bytes'] / 1e6:.2f} MB); "
            f"prepare {result['prepare_ratio']:.1f}x, total {result['total_ratio']:.1f}x "
            f"({min(totals):.1f}-{max(totals):.1f}); pixel values differ by at most {same:.1e}"
        )
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
