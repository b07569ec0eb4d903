"""The engine: where a generation runs and how a caller waits for it.

``engine`` holds :class:`Engine` (one per model and settings, shared by every face), the
in-flight call and its wait loop, the inline backend and the worker client (one reader thread
per worker, resend, stuck-worker replacement); ``worker`` is the worker process
(``python -m ryzenai_core.engine.worker``) that owns a session.
"""
