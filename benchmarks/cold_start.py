"""Cold start: from a fresh process to the first streamed token, with the plugin and without it.

    python scripts/build_fixtures.py --bench-only   # once: builds benchmarks/models/bench-30m (needs torch)
    python benchmarks/cold_start.py [--rounds 9] [--models bench-30m] [--json benchmarks/results/cold_start.json]

Every method is a new Python process (``python -c``), started one after another in each round
(the order rotates from round to round), timed from just before the process is started to its
first streamed text (``time.monotonic``, one clock for every process of the machine):

- ``floor_langchain`` / ``floor_llamaindex``: none of the plugin's code. The framework's own
  import (the ``langchain_core`` / ``llama_index.core`` modules the face's chat model imports),
  then a trivial chat model of the framework (a ``BaseChatModel`` with a ``_stream``, a
  ``CustomLLM`` with a decorated ``stream_complete``, as ``overhead.py``'s floors) streamed as the
  face is (``.stream("hi")``, ``.stream_complete("hi")``): what the framework's own first call
  costs (its callbacks, tracing, serialization of the model, instrumentation) is the floor's too.
  Its stream runs plain onnxruntime-genai: ``og.Config`` / ``og.Model`` / ``og.Tokenizer``,
  encode the prompt ``ChatRyzenAI`` renders for ``"hi"``, ``og.Generator`` and tokens until the
  first text;
- ``floor_oga``: onnxruntime-genai alone (no framework), the same steps;
- ``langchain``: ``from langchain_ryzenai import ChatRyzenAI; ChatRyzenAI(model=...).stream("hi")``
  up to its first chunk with text; ``llamaindex``: ``from llamaindex_ryzenai import RyzenAILLM;
  RyzenAILLM(model=...).stream_complete("hi")`` up to its first delta. Both with their default,
  the worker process (``execution="process"``); ``langchain_inline`` / ``llamaindex_inline``
  with ``execution="inline"`` (the model in the caller's process), for reference;
- ``python``: ``python -c pass``, the interpreter's own start;
- with ``--base DIR`` (another checkout of the project, e.g. ``git worktree add --detach DIR main``):
  ``langchain_base`` / ``llamaindex_base``, the same faces run from that checkout's code (its
  worker too), side by side with this one's in every round: a before / after on a busy machine.

Each face's own part is its time minus its floor's in the same round (median over the rounds,
with the lowest and highest). Every process also reports when each step ended, on the machine's
one monotonic clock, and the breakdown table shows each step's median:

- the floors: the framework's import (``framework``), its trivial model's call up to the model's
  own code (``framework call``), onnxruntime-genai's import (``oga import``, with numpy, which
  its first encode imports), the model's load and the first token;
- the faces (worker process): the caller's imports (the interpreter, the framework and the face:
  ``caller imports``), building the model object, the framework's part of the call up to the
  face's ``_stream`` (``framework call``), the face's own work before the worker starts (its
  modules, the engine, the package's files, the request: ``call prep``), the worker's start (a new
  interpreter, until its first line runs), its imports (the worker module), opening the package
  until it says it is ready (``worker open``), the load (onnxruntime-genai's import and the
  model's load in the worker, and the round trip) and the first token. The worker's two marks
  come from a small bootstrap this benchmark runs the worker module with (instead of
  ``python -m``; it imports the module, says when, and calls its ``main``).

The breakdown's last lines set each face's steps against its floor's: what the face adds in
the caller's imports (beyond the framework), before the load (building, the call, the worker's
start, imports and open, beyond the floor's model and call), in the load (beyond
onnxruntime-genai's import and the model's load) and in the first token. Each process's CPU
time to its exit (its own and its worker's, from the kernel's accounting of exited children)
is set against its floor's too: on a busy machine it varies less than the wall-clock time, but
it does not show what runs in parallel (the caller's work while its worker starts). For the worker, the benchmark's own
process then times a worker's start on its own (``Engine.load`` of a new engine: start, open
the package, load the model; then the first token of ``Engine.stream``). ``-X importtime``
of the face's import, the floor's and the worker's shows which packages the import time goes
to (self time summed per top-level package, median of 3 imports each), the plugin's part
being what the face's import loads that the floor's does not.

Same runtime threads everywhere (``--threads``, 2 by default, as in ``overhead.py``); the
plugin's KV prefix reuse has nothing to reuse in a new process.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
MODELS = {
    "bench-30m": ROOT / "benchmarks" / "models" / "bench-30m",
    "tiny-llama": ROOT / "tests" / "fixtures" / "models" / "tiny-llama",
}
THREADS = 2
USER = "hi"
#: New tokens asked for (the first text comes within them; the rest is cut when it has come).
NEW_TOKENS = 16

#: The framework modules ``langchain_ryzenai.chat_models`` / ``llamaindex_ryzenai.llms`` import.
FRAMEWORK_IMPORTS = {
    "langchain": (
        "langchain_core.callbacks",
        "langchain_core.language_models",
        "langchain_core.language_models.base",
        "langchain_core.language_models.chat_models",
        "langchain_core.messages",
        "langchain_core.output_parsers",
        "langchain_core.outputs",
        "langchain_core.runnables",
        "langchain_core.runnables.config",
        "langchain_core.tools",
        "langchain_core.utils.function_calling",
        "langchain_core.utils.pydantic",
        "pydantic",
    ),
    "llamaindex": (
        "llama_index.core",
        "llama_index.core.base.llms.generic_utils",
        "llama_index.core.base.llms.types",
        "llama_index.core.bridge.pydantic",
        "llama_index.core.instrumentation",
        "llama_index.core.llms.callbacks",
        "llama_index.core.llms.llm",
        "llama_index.core.utils",
    ),
}

#: ``python -c FLOOR_SOURCE ARGS_JSON``: the framework's import, a trivial chat model of it (none with no
#: framework), whose stream runs the plain runtime up to the first text.
FLOOR_SOURCE = """
import importlib, json, sys, time
args = json.loads(sys.argv[1])
for name in args["imports"]:
    importlib.import_module(name)
marks = {}


def first_text():
    marks["call"] = time.monotonic()
    import onnxruntime_genai as og
    import numpy  # what the first encode imports (the worker's load encodes): in the same step on both sides
    marks["imported"] = time.monotonic()
    cfg = og.Config(args["model"])
    cfg.overlay(args["overlay"])
    model = og.Model(cfg)
    tokenizer = og.Tokenizer(model)
    marks["loaded"] = time.monotonic()
    ids = tokenizer.encode(args["prompt"])
    stream = tokenizer.create_stream()
    params = og.GeneratorParams(model)
    params.set_search_options(max_length=len(ids) + args["new"], do_sample=False)
    gen = og.Generator(model, params)
    gen.append_tokens(ids)
    while not gen.is_done():
        gen.generate_next_token()
        text = stream.decode(gen.get_next_tokens()[0])
        if text:
            return text
    return ""


if args["face"] == "langchain":
    from langchain_core.language_models import BaseChatModel
    from langchain_core.messages import AIMessageChunk
    from langchain_core.outputs import ChatGenerationChunk

    class FloorChat(BaseChatModel):
        @property
        def _llm_type(self):
            return "floor"

        def _generate(self, messages, stop=None, run_manager=None, **kwargs):
            raise NotImplementedError

        def _stream(self, messages, stop=None, run_manager=None, **kwargs):
            chunk = ChatGenerationChunk(message=AIMessageChunk(content=first_text()))
            if run_manager is not None:
                run_manager.on_llm_new_token(chunk.text, chunk=chunk)
            yield chunk

    marks["framework"] = time.monotonic()
    for chunk in FloorChat().stream(args["user"]):
        if chunk.content:
            break
elif args["face"] == "llamaindex":
    from llama_index.core.base.llms.types import CompletionResponse, LLMMetadata
    from llama_index.core.llms.callbacks import llm_completion_callback
    from llama_index.core.llms.custom import CustomLLM

    class FloorLLM(CustomLLM):
        @property
        def metadata(self):
            return LLMMetadata(num_output=args["new"], model_name="floor")

        @llm_completion_callback()
        def complete(self, prompt, formatted=False, **kwargs):
            raise NotImplementedError

        @llm_completion_callback()
        def stream_complete(self, prompt, formatted=False, **kwargs):
            def gen():
                text = first_text()
                yield CompletionResponse(text=text, delta=text)

            return gen()

    marks["framework"] = time.monotonic()
    for response in FloorLLM().stream_complete(args["user"]):
        if response.delta:
            break
else:
    marks["framework"] = time.monotonic()
    first_text()
marks["first"] = time.monotonic()
print(json.dumps(marks))
"""

#: The line a worker started by :data:`WORKER_BOOT` writes to its stderr, then its marks as JSON.
WORKER_MARKS = "cold-start-worker-marks "

#: ``python -c WORKER_BOOT MODULE``: a worker as ``python -m MODULE`` runs it, with the time its
#: first line ran and the time its module was imported written to stderr (its stdout carries frames).
WORKER_BOOT = """
import time
started = time.monotonic()
import importlib, json, sys
worker = importlib.import_module(sys.argv[1])
sys.stderr.write(MARKS + json.dumps({"worker_started": started, "worker_imported": time.monotonic()}) + chr(10))
sys.stderr.flush()
worker.main()
""".replace("MARKS", repr(WORKER_MARKS))

#: ``python -c FACE_SOURCE ARGS_JSON``: a face's import, its model object, its stream up to the first text.
#: With a worker, the first call's steps (see the module docstring) are marked by wrapping what the
#: worker connection calls at each (``ryzenai_core.workers``, a few ms of imports, is imported after
#: ``constructed``); LangChain's part of the call ends where ``ChatRyzenAI._stream`` starts (LlamaIndex's
#: callback wrapper calls the face's ``metadata`` first: no line between them is drawn).
FACE_SOURCE = """
import json, sys, time
args = json.loads(sys.argv[1])
kw = {"model": args["model"], "num_threads": args["threads"], "execution": args["execution"]}


def mark_the_worker(marks):
    from ryzenai_core import spawn, workers

    first_frame, request = workers.read_first_frame, workers.WorkerConnection.request

    def worker_command(module, **kw):
        marks.setdefault("spawn", time.monotonic())
        return [sys.executable, "-c", args["boot"], module]

    def read_first_frame(proc, *a, **kw):
        try:
            return first_frame(proc, *a, **kw)
        finally:
            marks.setdefault("ready", time.monotonic())

    def loaded(self, *a, **kw):  # the first request to a new worker loads the model ("load", or a token count)
        try:
            return request(self, *a, **kw)
        finally:
            marks.setdefault("loaded", time.monotonic())

    spawn.worker_command, workers.read_first_frame, workers.WorkerConnection.request = worker_command, read_first_frame, loaded


def mark_the_call(cls, marks):
    own = cls._stream

    def _stream(self, *a, **kw):
        marks.setdefault("call", time.monotonic())
        return own(self, *a, **kw)

    cls._stream = _stream


if args["face"] == "langchain":
    from langchain_ryzenai import ChatRyzenAI
    marks = {"imported": time.monotonic()}
    llm = ChatRyzenAI(max_tokens=args["new"], **kw)
    marks["constructed"] = time.monotonic()
    if args["execution"] == "process":
        mark_the_worker(marks)
    mark_the_call(ChatRyzenAI, marks)
    for chunk in llm.stream(args["user"]):
        if chunk.content:
            break
else:
    from llamaindex_ryzenai import RyzenAILLM
    marks = {"imported": time.monotonic()}
    llm = RyzenAILLM(max_new_tokens=args["new"], **kw)
    marks["constructed"] = time.monotonic()
    if args["execution"] == "process":
        mark_the_worker(marks)
    for response in llm.stream_complete(args["user"]):
        if response.delta:
            break
marks["first"] = time.monotonic()
print(json.dumps(marks), flush=True)
"""

#: The steps of a process, each ending at its mark; a step's time is its mark minus the one before it.
FLOOR_STEPS = (
    ("framework", "framework"),
    ("framework call", "call"),
    ("oga import", "imported"),
    ("load", "loaded"),
    ("first token", "first"),
)
FACE_STEPS = (
    ("caller imports", "imported"),
    ("build", "constructed"),
    ("framework call", "call"),
    ("call prep", "spawn"),
    ("worker start", "worker_started"),
    ("worker imports", "worker_imported"),
    ("worker open", "ready"),
    ("load", "loaded"),
    ("first token", "first"),
)

FACES = ("langchain", "llamaindex")
#: Method name -> the PYTHONPATH its process (and its workers) get: the ``--base`` checkout's code.
PYTHONPATHS: dict[str, str] = {}


def base_path(checkout: Path) -> str:
    """A folder that names the packages of another checkout as this one installs them (``core`` is ``ryzenai_core``)."""
    import tempfile

    shim = Path(tempfile.mkdtemp(prefix="cold-start-base-"))
    for name, folder in (
        ("ryzenai_core", "core"),
        ("langchain_ryzenai", "langchain_ryzenai"),
        ("llamaindex_ryzenai", "llamaindex_ryzenai"),
    ):
        (shim / name).symlink_to(checkout.resolve() / folder, target_is_directory=True)
    return str(shim)


def _overlay() -> str:
    return json.dumps({"model": {"decoder": {"session_options": {"intra_op_num_threads": THREADS}}}})


def _env() -> dict[str, str]:
    """The children's environment: the execution default not overridden, nothing printed to stdout."""
    env = {k: v for k, v in os.environ.items() if k not in ("RYZENAI_LLM_EXECUTION", "PYTHONVERBOSE")}
    env.setdefault("PYTHONWARNINGS", "ignore")
    return env


def methods(model: Path, prompt: str, inline: bool, base: str | None = None) -> dict[str, list[str]]:
    """Method name -> the command line of its process."""
    floor = {"model": str(model), "overlay": _overlay(), "prompt": prompt, "new": NEW_TOKENS, "user": USER}
    face = {"model": str(model), "threads": THREADS, "user": USER, "new": NEW_TOKENS, "boot": WORKER_BOOT}
    out: dict[str, list[str]] = {"python": [sys.executable, "-c", "pass"]}
    out["floor_oga"] = [sys.executable, "-c", FLOOR_SOURCE, json.dumps({**floor, "imports": [], "face": None})]
    for name in FACES:
        out[f"floor_{name}"] = [
            sys.executable,
            "-c",
            FLOOR_SOURCE,
            json.dumps({**floor, "imports": FRAMEWORK_IMPORTS[name], "face": name}),
        ]
        out[name] = [sys.executable, "-c", FACE_SOURCE, json.dumps({**face, "face": name, "execution": "process"})]
        if base is not None:
            out[f"{name}_base"] = out[name]
            PYTHONPATHS[f"{name}_base"] = base
        if inline:
            out[f"{name}_inline"] = [
                sys.executable,
                "-c",
                FACE_SOURCE,
                json.dumps({**face, "face": name, "execution": "inline"}),
            ]
    return out


def run_once(cmd: list[str], pythonpath: str | None = None) -> dict[str, float]:
    """Start one process; the seconds from its start to each mark it reports ("end": to its exit)."""
    env = _env()
    if pythonpath is not None:
        env["PYTHONPATH"] = pythonpath
    cpu0 = _children_cpu()
    t0 = time.monotonic()
    # From the other checkout's folder: `python -c` puts the working directory first on sys.path.
    cwd = pythonpath if pythonpath is not None else None
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=cwd, timeout=300)  # noqa: S603
    end = time.monotonic()
    cpu = _children_cpu() - cpu0
    if proc.returncode != 0:
        raise SystemExit(f"{cmd[:2]} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    lines = proc.stdout.strip().splitlines()
    marks: dict[str, float] = json.loads(lines[-1]) if lines else {}
    for line in proc.stderr.splitlines():
        if line.startswith(WORKER_MARKS):
            marks.update(json.loads(line[len(WORKER_MARKS) :]))
    out = {k: v - t0 for k, v in marks.items()}
    out["end"] = end - t0
    out["cpu"] = cpu
    out.setdefault("first", out["end"])  # python -c pass: its whole life
    return out


def _children_cpu() -> float:
    """CPU seconds (user + system) of this process's children that have exited, and of theirs (a face's worker)."""
    try:
        import resource
    except ImportError:  # Windows
        return 0.0
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def rendered_prompt(model: Path) -> str:
    """The prompt text the faces send for :data:`USER` (the package's template, rendered in this process)."""
    from ryzenai_core import ChatMessage, Engine

    engine = Engine.get(model, num_threads=THREADS, execution="inline")
    return engine.render([ChatMessage("user", USER)])


def worker_start(model: Path, repeat: int) -> dict[str, Any]:
    """A worker started from this (warm) process: start + open the package + load, then the first token.

    ``Engine.load`` of a new engine (its own worker) returns the load time the worker measured;
    the rest of the call is the worker's start (interpreter, imports, package, "ready").
    """
    from ryzenai_core import ChatMessage, Engine
    from ryzenai_core.options import validated_options

    base = Engine.get(model, num_threads=THREADS, execution="process")
    opts = validated_options(max_new_tokens=NEW_TOKENS, temperature=0)
    rows = []
    for _ in range(repeat):
        engine = Engine(base.key, "process")
        t0 = time.monotonic()
        load = engine.load() or 0.0
        t1 = time.monotonic()
        for chunk in engine.stream([ChatMessage("user", USER)], opts):
            if chunk.text:
                break
        t2 = time.monotonic()
        engine.close()
        rows.append({"start_ms": (t1 - t0 - load) * 1000, "load_ms": load * 1000, "first_token_ms": (t2 - t1) * 1000})
        time.sleep(0.2)
    return {k: _summary([r[k] for r in rows], 1) for k in rows[0]}


_IMPORT_LINE = re.compile(r"import time:\s+(\d+)\s+\|\s+(\d+)\s+\|(\s*)(\S+)")


def import_profile(code: list[str], repeat: int = 3) -> dict[str, float]:
    """``-X importtime`` of ``python <code>``: ms of self time per top-level package (median of ``repeat``)."""
    runs: list[dict[str, float]] = []
    for _ in range(repeat):
        proc = subprocess.run(  # noqa: S603
            [sys.executable, "-X", "importtime", *code],
            capture_output=True,
            text=True,
            env=_env(),
            stdin=subprocess.DEVNULL,
            timeout=300,
        )
        per: dict[str, float] = defaultdict(float)
        for line in proc.stderr.splitlines():
            m = _IMPORT_LINE.match(line)
            if m:
                per[m.group(4).split(".")[0]] += int(m.group(1)) / 1000
        runs.append(per)
    names = set().union(*runs)
    return {n: round(statistics.median(r.get(n, 0.0) for r in runs), 1) for n in names}


def profiles() -> dict[str, Any]:
    """Import profiles: each face's import against its floor's, and the worker's before it can load a model."""
    out: dict[str, Any] = {}
    for face, code in (
        ("langchain", "from langchain_ryzenai import ChatRyzenAI"),
        ("llamaindex", "from llamaindex_ryzenai import RyzenAILLM"),
    ):
        floor = "import onnxruntime_genai; " + "; ".join(f"import {m}" for m in FRAMEWORK_IMPORTS[face])
        out[face] = {"face": import_profile(["-c", code]), "floor": import_profile(["-c", floor])}
    # The worker's module (what `python -m` imports before the model), then the session and the runtime.
    from ryzenai_core.spawn import WORKER_MODULES

    out["worker"] = import_profile(
        ["-c", f"import {WORKER_MODULES[0]}, ryzenai_core.generation.session, onnxruntime_genai"]
    )
    return out


def measure(name: str, model: Path, rounds: int, inline: bool, base: str | None = None) -> dict[str, Any]:
    prompt = rendered_prompt(model)
    cmds = methods(model, prompt, inline, base)
    for k, cmd in cmds.items():  # warm-up: the files in the page cache, the bytecode compiled
        run_once(cmd, PYTHONPATHS.get(k))
    runs: dict[str, list[dict[str, float]]] = {k: [] for k in cmds}
    names = list(cmds)
    for r in range(rounds):
        order = names[r % len(names) :] + names[: r % len(names)]
        for k in order:
            time.sleep(0.3)  # the previous process's workers and threads gone
            runs[k].append(run_once(cmds[k], PYTHONPATHS.get(k)))
        print(f"  round {r + 1}/{rounds}: " + ", ".join(f"{k} {runs[k][-1]['first']:.3f}" for k in names), flush=True)
    out: dict[str, Any] = {
        "rounds": rounds,
        "prompt": prompt,
        "total_s": {k: _summary([m["first"] for m in rs], 3) for k, rs in runs.items()},
        "cpu_s": {k: _summary([m["cpu"] for m in rs], 3) for k, rs in runs.items()},
        "own_cpu_s": {},
        "marks_s": {
            k: {mark: _summary([m[mark] for m in rs], 3) for mark in rs[0] if mark != "cpu"} for k, rs in runs.items()
        },
        "steps_s": {k: _steps(rs, FLOOR_STEPS if k.startswith("floor_") else FACE_STEPS) for k, rs in runs.items()},
        "own_part_s": {},
        "own_parts_s": {},
        "rounds_s": {k: [{m: round(v, 4) for m, v in row.items()} for row in rs] for k, rs in runs.items()},
    }
    for face in FACES:
        floor = runs[f"floor_{face}"]
        for k in (face, f"{face}_inline", f"{face}_base"):
            if k in runs:
                pairs = list(zip(runs[k], floor, strict=True))
                out["own_part_s"][k] = _summary([m["first"] - f["first"] for m, f in pairs], 3)
                out["own_cpu_s"][k] = _summary([m["cpu"] - f["cpu"] for m, f in pairs], 3)
                parts = [own_parts(m, f) for m, f in pairs]
                out["own_parts_s"][k] = {p: _summary([row[p] for row in parts], 3) for p in parts[0]}
    out["worker_start_ms"] = worker_start(model, max(3, rounds // 2))
    return out


def _steps(rows: list[dict[str, float]], steps: tuple[tuple[str, str], ...]) -> dict[str, dict[str, float]]:
    """Each step's seconds (its mark minus the mark before it), for the steps every row marked."""
    out: dict[str, dict[str, float]] = {}
    names = [(step, mark) for step, mark in steps if all(mark in row for row in rows)]
    for i, (step, mark) in enumerate(names):
        before = names[i - 1][1] if i else None
        out[step] = _summary([row[mark] - (row[before] if before else 0.0) for row in rows], 3)
    return out


def own_parts(face: dict[str, float], floor: dict[str, float]) -> dict[str, float]:
    """A face's time beyond its floor's in one round, by where it goes (the parts add up to the difference).

    - ``imports``: the caller's imports beyond the framework's (the floor's ``framework`` mark);
    - ``before the load``: building the model object and the call up to the worker's "ready" (the
      framework's part of the call, the face's, the worker's start, its imports and the package's
      opening) beyond the floor's model object and call up to its runtime's import;
    - ``load``: the load (with a worker: onnxruntime-genai's and numpy's import there, the model's
      load and the round trip) beyond the floor's imports of the two and its load;
    - ``first token``: from the load to the first text, beyond the floor's.
    Inline, the load has no mark of its own: ``call`` is the whole call beyond the floor's.
    """
    imports = face["imported"] - floor["framework"]
    floor_call = floor["call"] - floor["framework"]
    if "loaded" not in face:
        return {
            "imports": imports,
            "build": face["constructed"] - face["imported"],
            "call": (face["first"] - face["constructed"]) - (floor["first"] - floor["framework"]),
        }
    return {
        "imports": imports,
        "before the load": face.get("ready", face["constructed"]) - face["imported"] - floor_call,
        "load": (face["loaded"] - face.get("ready", face["constructed"])) - (floor["loaded"] - floor["call"]),
        "first token": (face["first"] - face["loaded"]) - (floor["first"] - floor["loaded"]),
    }


def _summary(values: list[float], digits: int) -> dict[str, float]:
    return {
        "median": round(statistics.median(values), digits),
        "min": round(min(values), digits),
        "max": round(max(values), digits),
    }


def report(results: dict[str, Any]) -> list[str]:
    """Text summary and the RESULTS.md rows."""
    lines = []
    for name, res in results["models"].items():
        lines.append(
            f"\n{name}: {res['rounds']} rounds, {results['threads']} thread(s); process start -> first text, s"
        )
        lines.append(
            f"  {'method':<20}{'total (min-max)':>24}{'imported':>10}{'built/loaded':>14}{'own part (min-max)':>26}"
            f"{'CPU to exit':>13}{'own CPU (min-max)':>26}"
        )
        for k, t in res["total_s"].items():
            marks = res["marks_s"][k]
            imp = marks.get("imported", {}).get("median")
            mid = (marks.get("constructed") or marks.get("loaded") or {}).get("median")
            own = res["own_part_s"].get(k)
            lines.append(
                f"  {k:<20}{t['median']:>9.3f} ({t['min']:.3f}-{t['max']:.3f})"
                + (f"{imp:>10.3f}" if imp is not None else f"{'-':>10}")
                + (f"{mid:>14.3f}" if mid is not None else f"{'-':>14}")
                + (f"{own['median']:>+11.3f} ({own['min']:+.3f} to {own['max']:+.3f})" if own else f"{'':>26}")
                + f"{res['cpu_s'][k]['median']:>13.3f}"
                + (
                    f"{cpu['median']:>+11.3f} ({cpu['min']:+.3f} to {cpu['max']:+.3f})"
                    if (cpu := res["own_cpu_s"].get(k))
                    else ""
                )
            )
        lines.append("\n  breakdown: median seconds of each step (a step ends at its mark)")
        for k, steps in res["steps_s"].items():
            if k == "python":
                continue
            lines.append(f"  {k:<20}" + ", ".join(f"{step} {v['median']:.3f}" for step, v in steps.items()))
        lines.append(
            "\n  own part (the face minus its floor, per round), by where it goes: median seconds (min to max)"
        )
        for k, parts in res["own_parts_s"].items():
            total = res["own_part_s"][k]
            lines.append(
                f"  {k:<20}{total['median']:+.3f} = "
                + " + ".join(f"{p} {v['median']:+.3f} ({v['min']:+.3f} to {v['max']:+.3f})" for p, v in parts.items())
            )
        w = res["worker_start_ms"]
        lines.append(
            f"  a worker from a warm process: start {w['start_ms']['median']:.0f} ms, load {w['load_ms']['median']:.0f} ms, "
            f"first token {w['first_token_ms']['median']:.0f} ms"
        )
    prof = results.get("import_profile")
    if prof:
        for face in FACES:
            face_p, floor_p = prof[face]["face"], prof[face]["floor"]
            extra = {k: v - floor_p.get(k, 0.0) for k, v in face_p.items()}
            top = sorted(extra.items(), key=lambda kv: -kv[1])[:10]
            lines.append(
                f"\n  {face} import, ms of self time beyond the floor's (-X importtime), total "
                f"{sum(face_p.values()) - sum(floor_p.values()):+.0f}: "
                + ", ".join(f"{k} {v:+.0f}" for k, v in top if abs(v) >= 1)
            )
        worker = sorted(prof["worker"].items(), key=lambda kv: -kv[1])[:10]
        lines.append(
            f"  worker import (to a model load), ms, total {sum(prof['worker'].values()):.0f}: "
            + ", ".join(f"{k} {v:.0f}" for k, v in worker if v >= 1)
        )
    lines.append("\nRESULTS.md rows:")
    for name, res in results["models"].items():
        t, own = res["total_s"], res["own_part_s"]
        cells = []
        for face in FACES:
            cells.append(f"{t[f'floor_{face}']['median']:.2f}")
            cells.append(
                f"{t[face]['median']:.2f}; own {own[face]['median']:+.2f} "
                f"({own[face]['min']:+.2f} to {own[face]['max']:+.2f})"
            )
            inline = f"{face}_inline"
            cells.append(f"{t[inline]['median']:.2f}; own {own[inline]['median']:+.2f}" if inline in t else "-")
        head = (
            f"{results['label']}; {res['rounds']} rounds, {results['threads']} thread(s), load average "
            f"{results['load_average_before'][0]:.1f} / {results['load_average_after'][0]:.1f}"
        )
        lines.append(
            f"| {head} | {name}, python {t['python']['median']:.2f}, oga {t['floor_oga']['median']:.2f} | "
            + " | ".join(cells)
            + " |"
        )
    return lines


def load_average() -> list[float]:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return [0.0, 0.0, 0.0]


def compiled(checkouts: list[Path]) -> None:
    """Byte-compile the plugin's packages of each checkout (into their __pycache__ folders)."""
    import compileall

    for checkout in checkouts:
        for folder in ("core", "langchain_ryzenai", "llamaindex_ryzenai"):
            compileall.compile_dir(checkout / folder, quiet=1)


def main() -> None:
    global THREADS
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--models", nargs="*", default=["bench-30m"], choices=list(MODELS))
    parser.add_argument(
        "--json", type=Path, default=None, help="write the results here (e.g. benchmarks/results/cold_start.json)"
    )
    parser.add_argument("--label", default="", help="a note stored with the results (e.g. the load on the machine)")
    parser.add_argument("--threads", type=int, default=2, help="runtime threads, the same on every side")
    parser.add_argument("--no-inline", action="store_true", help='skip the faces with execution="inline"')
    parser.add_argument("--no-profile", action="store_true", help="skip the -X importtime profiles")
    parser.add_argument(
        "--base",
        type=Path,
        default=None,
        help="another checkout (e.g. a worktree of main): its faces run side by side, as *_base",
    )
    args = parser.parse_args()
    THREADS = args.threads
    # As an install leaves them (pip compiles a wheel's modules; PYTHONDONTWRITEBYTECODE would make every
    # process here compile the plugin's sources again, which no installed plugin does, while the
    # framework and the runtime in site-packages are compiled).
    compiled([ROOT] + ([args.base] if args.base is not None else []))
    import onnxruntime_genai as og

    results: dict[str, Any] = {
        "threads": THREADS,
        "cpus": os.cpu_count(),
        "onnxruntime_genai": og.__version__,
        "label": args.label,
        "load_average_before": load_average(),
        "models": {},
    }
    for name in args.models:
        path = MODELS[name]
        if not (path / "genai_config.json").exists():
            print(f"skipping {name}: {path} is missing (python scripts/build_fixtures.py --bench-only)")
            continue
        print(f"{name}:", flush=True)
        base = base_path(args.base) if args.base is not None else None
        results["models"][name] = measure(name, path, args.rounds, not args.no_inline, base)
    if not args.no_profile:
        results["import_profile"] = profiles()
    results["load_average_after"] = load_average()
    for line in report(results):
        print(line)
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=2) + "\n")
        print(f"wrote {args.json}")


if __name__ == "__main__":
    sys.exit(main())
