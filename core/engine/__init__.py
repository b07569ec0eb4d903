"""The engine: where a generation runs and how a caller waits for it.

``engine`` holds :class:`Engine` (one per model and settings, shared by every face, kept in
the one registry of :mod:`ryzenai_core.lifecycle`); ``registry`` what decides which engine a
call gets (its slot, NPU identity, the folder a name named); ``inflight`` the in-flight call and
its one wait loop; ``inline`` the inline backend (a producer thread per generation); ``client``
the worker client (a generation's part of :class:`~ryzenai_core.workers.WorkerConnection`:
resend, stuck streams; a worker process starts with its engine's first call); ``worker`` the
worker process (``python -m ryzenai_core.engine.worker``) that owns a session. May import the
shared modules, package, prompt and generation; nothing imports it but the faces and the core's face.
"""
