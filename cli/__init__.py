"""ryzenai_cli: the ``ryzenai-llm`` command line (info, chat, bench, demo).

It sits above the core and both faces: ``demo`` runs a RAG pipeline through LangChain and
LlamaIndex, so it may import them; the core imports neither.
"""
