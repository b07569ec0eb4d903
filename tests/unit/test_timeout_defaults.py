"""The worker timeouts the docs state are the ones the code uses when no variable sets them."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

from conftest import ROOT

NAMES = (
    "RYZENAI_LLM_START_TIMEOUT",
    "RYZENAI_LLM_LOAD_TIMEOUT",
    "RYZENAI_LLM_CALL_TIMEOUT",
    "RYZENAI_LLM_COMPILE_TIMEOUT",
)
STATED = re.compile(r"`(RYZENAI_LLM_\w+_TIMEOUT)` (?:\((\d+) s|seconds \((\d+)\))")


def test_the_documented_worker_timeouts_are_the_defaults():
    env = {k: v for k, v in os.environ.items() if k not in NAMES}
    code = (
        "import json; from ryzenai_core import workers as w; from ryzenai_core.embeddings.runner import compile_deadline; "
        "print(json.dumps([w.START_TIMEOUT, w.LOAD_TIMEOUT, w.CALL_TIMEOUT, compile_deadline().seconds]))"
    )
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    defaults = dict(zip(NAMES, json.loads(out.stdout), strict=True))
    stated = [
        (m.group(1), float(m.group(2) or m.group(3)), page.name)
        for page in [ROOT / "docs" / "how-it-works.md", ROOT / "docs" / "embeddings-and-reranking.md"]
        for m in STATED.finditer(page.read_text(encoding="utf-8"))
    ]
    assert {name for name, _, _ in stated} == set(NAMES)
    assert [(name, value, page) for name, value, page in stated if value != defaults[name]] == []
