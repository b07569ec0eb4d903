"""ryzenai_cli: the ``ryzenai-llm`` command line (info, pull, list, chat, bench, doctor, demo).

It sits above the core and both faces: ``demo`` runs a RAG pipeline through LangChain and
LlamaIndex (``demo_langchain``, ``demo_llamaindex``: the library packages carry no demo), so it
may import them; the core imports neither. ``main`` registers every command's module; ``info``
is what ``info`` and ``pull`` show.
"""
