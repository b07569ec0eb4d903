"""The prompt: from messages to the text a model reads, and back from its output.

``templates`` renders a model's own Jinja chat template in a sandbox (:class:`ChatTemplate`);
``formats`` knows each family's output markup (tool calls, reasoning) and parses it;
``structured`` builds the grammars for JSON and tool-call output. Pure text in, text out: this
wing never touches onnxruntime-genai.
"""
