"""The prompt: from messages to the text a model reads, and back from its output.

``templates`` renders a model's own chat template (:class:`~.templates.ChatTemplate`, a
package's templates in :class:`~.templates.PackageTemplates`) in the bounded Jinja sandbox of
``sandbox``, with the fallbacks, special tokens and overrides of ``sources``; ``formats`` knows
each family's output markup (tool calls, reasoning) and parses it; ``structured`` builds the
grammars for JSON and tool-call output. Pure text in, text out: this wing imports only the
core's shared modules (errors, messages, options), never the package wing (a template reads a
package's name, model type, tokenizer config and template source, whatever holds them) and
never onnxruntime-genai.
"""
