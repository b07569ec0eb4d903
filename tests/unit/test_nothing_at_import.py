"""Importing a face and building its model objects starts nothing: no process, thread, file or network.

The model's worker process starts, and its package is read, with the first call. Checked in a new
interpreter that imports the frameworks first (what they do at their own import is theirs), then
watches the faces' imports and 20 model objects of each face through audit hooks, the thread
start of the ``threading`` module and the process's native thread count.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

from conftest import TINY_LLAMA

CHILD = textwrap.dedent(
    """
    import json, os, sys, threading

    # The frameworks' own imports first: what they do there is theirs.
    import langchain_core.callbacks, langchain_core.language_models, langchain_core.messages
    import langchain_core.outputs, langchain_core.runnables, langchain_core.tools
    import llama_index.core, llama_index.core.llms.llm

    WATCHED = ("subprocess.Popen", "os.fork", "os.forkpty", "os.posix_spawn", "os.spawn", "os.exec", "os.system",
               "os.startfile", "open", "os.listdir", "os.scandir")
    NETWORK = ("socket.", "http.", "urllib.", "ftplib.", "smtplib.")
    events, threads, recording = [], [], [True]

    def importing():
        frame = sys._getframe(2)
        while frame is not None:
            if frame.f_code.co_filename.startswith("<frozen importlib"):
                return True
            frame = frame.f_back
        return False

    def hook(event, args):
        if recording[0] and (event in WATCHED or event.startswith(NETWORK)) and not importing():
            events.append([event, repr(args)[:200]])

    start = threading.Thread.start

    def watched_start(self):
        threads.append(self.name)
        start(self)

    def native_threads():
        try:
            return len(os.listdir("/proc/self/task"))
        except OSError:
            return threading.active_count()

    before = native_threads()
    threading.Thread.start = watched_start
    sys.addaudithook(hook)

    from langchain_ryzenai import ChatRyzenAI
    from llamaindex_ryzenai import RyzenAILLM

    model = sys.argv[1]
    built = [ChatRyzenAI(model=model) for _ in range(20)] + [RyzenAILLM(model=model) for _ in range(20)]
    built += [ChatRyzenAI(model=model, execution="inline"), RyzenAILLM(model=model, execution="inline")]
    recording[0] = False
    after = native_threads()
    print(json.dumps({"events": events, "threads": threads, "native_threads": [before, after]}))
    """
)


def test_importing_the_faces_and_building_40_models_starts_nothing():
    env = {k: v for k, v in os.environ.items() if k not in ("RYZENAI_LLM_EXECUTION", "PYTHONVERBOSE")}
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(TINY_LLAMA)], capture_output=True, text=True, env=env, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    assert seen["events"] == []  # no process, no file or folder read, no network
    assert seen["threads"] == []
    before, after = seen["native_threads"]
    assert after == before
