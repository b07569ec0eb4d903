"""One generation on a loaded model, in this process.

``session`` owns a loaded onnxruntime-genai model and runs the token loop; ``kv_cache`` keeps
the previous prompt's cache for reuse where the model allows it; ``streaming`` turns tokens into
:class:`Chunk` objects (incremental decoding, stop strings held back, reasoning and tool calls
split out); ``token_bytes`` the byte tables that decoding relies on. The engine wing runs a
session here or in a worker process.
"""
