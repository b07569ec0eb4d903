"""The model package: a folder read once and what it decides.

``folder`` reads a model folder into a :class:`~.folder.ModelPackage`, from what ``scan`` finds in
its files (genai_config.json's provider, rai_config.json, the tokenizer, the NPU's bucket files,
external data, Git LFS pointers, broken links, path hazards); ``limits`` reads its window, prompt
limit and long-prompt policy into a budget; ``reuse`` says whether its KV cache may be reused
between calls; ``budget`` holds the prompt limit, buckets and window
(:class:`~.budget.ContextBudget`); ``packing`` fits retrieved context into that budget; ``hub``
maps names and Hugging Face ids to folders in the cache; ``runtime`` says which onnxruntime-genai
build and Ryzen AI release is installed, ``ep`` whether its Ryzen AI EP library is found and
loads (what decides whether it can run the NPU); ``capabilities`` what a package can do (tools,
images, thinking) and whether it loads here, without loading it. This wing imports only the
core's shared modules (errors, the embedded models) and, in ``capabilities`` alone, the prompt
wing's templates; it never imports generation, the engines or the faces.
"""
