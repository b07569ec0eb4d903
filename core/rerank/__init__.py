"""Rerankers: cross-encoders that score (query, passage) pairs, on the encoder engine.

``package`` reads a cross-encoder folder once (:class:`~ryzenai_core.rerank.package.RerankPackage`:
one relevance logit, how a logit becomes a score); ``engine`` scores passages against a query
(:class:`~ryzenai_core.rerank.engine.RerankEngine`) and holds the faces' settings
(:class:`~ryzenai_core.rerank.engine.RerankSettings`). This wing imports the embeddings wing's
encoder machinery (folder, batches, engine, settings) and the core's shared modules (errors,
messages); nothing imports it but the faces, the CLI and the package's top level.
"""
