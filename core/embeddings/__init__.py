"""Encoder models on onnxruntime: embeddings, and the machinery rerankers share.

``folder`` reads what every ONNX encoder folder says (:class:`~.folder.EncoderFolder`),
``package`` an embedding folder (:class:`~.package.EmbeddingPackage`); ``batches`` plans
length-sorted, padded runs for static NPU shapes; ``engine`` runs a folder's sessions, here or
in worker processes (``runner``, ``worker``), closing idle ones (:class:`~.engine.EncoderEngine`);
``embedding`` turns texts into pooled, normalised vectors (:class:`~.embedding.EmbeddingEngine`);
``settings`` is what the faces take (:class:`~.settings.EncoderSettings`,
:class:`~.settings.EmbeddingSettings`). This wing imports the core's shared modules (errors,
messages, ipc, spawn, workers, lifecycle) and the package wing's folder helpers, budget and hub; the rerank wing
builds on it, and it never imports onnxruntime-genai.
"""
