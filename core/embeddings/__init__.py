"""Encoder models on onnxruntime: embeddings (and the machinery rerankers share).

``engine`` reads an embedding or encoder folder, plans padded batches for static NPU shapes,
runs the onnxruntime session here or in a worker process (``worker``) and pools the output.
"""
