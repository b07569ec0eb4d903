"""The model package: a folder read once and what it decides.

``folder`` reads a model folder into a :class:`~.folder.ModelPackage` and plans its budget,
from what ``scan`` finds in its files (genai_config.json's provider, rai_config.json, the
tokenizer, the NPU's bucket files, Git LFS pointers, path hazards); ``reuse`` says whether its KV
cache may be reused between calls; ``budget`` holds the prompt limit, buckets and window
(:class:`~.budget.ContextBudget`); ``packing`` fits retrieved context into that budget; ``hub``
maps names and Hugging Face ids to folders in the cache; ``runtime`` says which onnxruntime-genai
build and Ryzen AI release is installed; ``capabilities`` what a package can do (tools, images,
thinking) without loading it. This wing imports only the core's shared modules (errors, the
embedded models) and, in ``capabilities`` alone, the prompt wing's templates; it never imports
generation, the engines or the faces.
"""
