"""The model package: a folder read once and what it decides.

``folder`` reads a model folder (genai_config.json, rai_config.json, the tokenizer, the NPU's
bucket files, Git LFS pointers) into a :class:`ModelPackage`; ``budget`` turns it into the
prompt limit, buckets and window (:class:`ContextBudget`); ``packing`` fits retrieved context
into that budget; ``hub`` maps names and Hugging Face ids to folders in the cache; ``runtime``
says which onnxruntime-genai build and Ryzen AI release is installed; ``capabilities`` what a
package can do (tools, images, thinking) without loading it. This wing imports only the core's
shared modules (errors, options, messages) and the prompt wing's templates.
"""
