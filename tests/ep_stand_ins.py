"""Stand-in Ryzen AI EP libraries, built with the C compiler at test time (Linux).

onnxruntime registers an EP library by loading it and calling its ``CreateEpFactories``; the
RyzenAI code of onnxruntime-genai then asks for NPU devices. Each stand-in fails one step of
that, as a real laptop can:

- ``no_device``: loads, and its ``CreateEpFactories`` makes no factory, so the runtime finds no
  NPU device ("No RyzenAI devices detected", as with a missing or stopped NPU driver);
- ``other_release``: loads but has no ``CreateEpFactories`` (an EP library of another release);
- ``missing_dependency``: needs a library that is not there (``libryzenai_standin_dep.so``);
- ``not_a_library``: a file that is no shared library at all.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

EP_LINUX = "libonnxruntime_providers_ryzenai.so"
MISSING_DEPENDENCY = "libryzenai_standin_dep.so"

_NO_DEVICE = """
#include <stddef.h>
void *CreateEpFactories(const char *name, const void *api, const void *logger, void **factories,
                        size_t max_factories, size_t *num_factories) {
    *num_factories = 0;
    return NULL;
}
void *ReleaseEpFactory(void *factory) { return NULL; }
"""
_OTHER_RELEASE = "int RyzenAI_Shutdown(void) { return 0; }\n"
_NEEDS_DEPENDENCY = """
#include <stddef.h>
int standin_dependency(void);
void *CreateEpFactories(const char *name, const void *api, const void *logger, void **factories,
                        size_t max_factories, size_t *num_factories) {
    *num_factories = (size_t)standin_dependency();
    return NULL;
}
"""
_DEPENDENCY = "int standin_dependency(void) { return 0; }\n"


def _compile(source: str, out: Path, *extra: str) -> None:
    c = out.with_suffix(".c")
    c.write_text(source, encoding="utf-8")
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(out), str(c), *extra], check=True, capture_output=True)


def build(root: Path) -> dict[str, Path]:
    """The stand-ins, each named as the real library in its own folder under ``root``."""
    if shutil.which("gcc") is None:
        pytest.skip("no C compiler (gcc) to build the stand-in EP libraries")
    made = {}
    for kind in ("no_device", "other_release", "missing_dependency", "not_a_library"):
        (root / kind).mkdir(parents=True)
        made[kind] = root / kind / EP_LINUX
    _compile(_NO_DEVICE, made["no_device"])
    _compile(_OTHER_RELEASE, made["other_release"])
    dep = root / "missing_dependency" / MISSING_DEPENDENCY
    _compile(_DEPENDENCY, dep)
    _compile(_NEEDS_DEPENDENCY, made["missing_dependency"], f"-L{dep.parent}", "-lryzenai_standin_dep")
    dep.unlink()  # linked against it, and now it is gone
    made["not_a_library"].write_text("not a shared library\n", encoding="utf-8")
    return made
