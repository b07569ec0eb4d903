"""One generation on a loaded model, in this process.

``session`` composes the parts and runs the token loop: ``loader`` loads the model (runtime
configuration, providers, load errors), ``tokens`` encodes and decodes (NULs, byte tables from
``token_bytes``), ``prompt_builder`` turns messages into a :class:`Prepared` prompt (render, ids,
images, dropping old turns), ``scheduler`` runs one generation at a time and stops an unread
stream's hold, ``kv_cache`` keeps the previous prompt's cache for reuse where the model allows it,
``stop`` decides why the loop ends, ``adapters`` loads and checks a call's LoRA adapter once,
``streaming`` turns tokens into :class:`Chunk` objects,
``call`` is one call's spec, cancellation and phase, and ``probes`` are short runs that show what
the runtime does (guidance applied, logits finite, a timed run). This wing imports the core's shared modules
and the package and prompt wings; the engine wing runs a session here or in a worker process.
"""
