"""Sample text for measuring how a package's tokenizer compares with LlamaIndex's.

LlamaIndex's PromptHelper counts tokens with ``Settings.tokenizer`` (tiktoken's cl100k_base
unless the user sets another). :class:`~llamaindex_ryzenai.RyzenAILLM` reports a context
window scaled by the largest ratio (package tokens / LlamaIndex tokens) over these segments,
so that whatever PromptHelper packs still fits the package's real prompt limit. Each segment
is one kind of text a retrieval pipeline sends: prose, technical prose, Markdown, code, JSON,
numbers, and several languages and scripts. The ratio of a mix is never above the largest
ratio of its parts.
"""

from __future__ import annotations

__all__ = ["SEGMENTS"]

SEGMENTS: tuple[str, ...] = (
    # narrative prose
    "The harbour was quiet in the early morning. Fishing boats rocked against the pier while the "
    "gulls argued over scraps, and the smell of salt and diesel drifted up the narrow streets "
    "towards the market, where the first stalls were opening their shutters.",
    # technical prose
    "Retrieval-augmented generation splits documents into chunks, embeds each chunk as a vector and "
    "stores it in an index. At query time the retriever returns the chunks nearest to the question, "
    "and the language model answers from them, citing its sources. The context window bounds how "
    "many chunks fit into one prompt.",
    # business / legal prose
    "Pursuant to Section 4.2 of the Agreement, the Licensee shall notify the Licensor in writing within "
    "thirty (30) days of any material change to the scope of deployment, including additional sites, "
    "subsidiaries or third-party contractors.",
    # Markdown with a list and a table
    "## Installation\n\n1. Create a virtual environment: `python -m venv .venv`\n2. Install the package: "
    "`pip install ryzenai-llm`\n3. Check the setup with `ryzenai-llm info`\n\n| model | window | mode |\n"
    "|-------|--------|------|\n| Llama-3.2-1B | 4096 | NPU |\n| Qwen3-4B | 4096 | NPU |\n",
    # Python code
    "def moving_average(values: list[float], window: int = 3) -> list[float]:\n"
    '    """Average of each run of `window` values."""\n'
    "    if window < 1:\n        raise ValueError(f'window must be >= 1, got {window}')\n"
    "    return [sum(values[i : i + window]) / window for i in range(len(values) - window + 1)]\n",
    # JSON
    '{"id": "order-88231", "customer": {"name": "Ada Lovelace", "email": "ada@example.com"}, '
    '"items": [{"sku": "NPU-300", "qty": 2, "price": 499.0}, {"sku": "USB-C", "qty": 1, "price": 19.99}], '
    '"paid": true}',
    # numbers, dates, identifiers
    "Invoice 2024-07-26/0042: 3 x 19.99 EUR = 59.97 EUR, VAT 19% = 11.39 EUR; IBAN DE89 3704 0044 0532 0130 00; "
    "call +1 (415) 555-0199 between 09:00 and 17:30 UTC-7.",
    # German
    "Die Gesundheitsversorgung in ländlichen Regionen erfordert eine enge Zusammenarbeit zwischen "
    "Krankenhäusern, Hausärzten und Pflegediensten, damit Patientinnen und Patienten schnell behandelt werden.",
    # French
    "Les bibliothèques municipales proposent désormais des ateliers numériques gratuits : initiation à "
    "l'informatique, protection des données personnelles et découverte de l'intelligence artificielle.",
    # Spanish
    "El informe anual señala que la producción de energía solar aumentó un 23 % respecto al año anterior, "
    "gracias a la instalación de nuevos paneles en las zonas rurales del país.",
    # Chinese
    "人工智能正在改变我们的工作和生活方式。在本地设备上运行大型语言模型，可以保护用户隐私并降低延迟。",
    # Japanese
    "東京の天気は晴れのち曇り、最高気温は二十八度の予想です。午後から所により雨が降るでしょう。",
    # Russian
    "Новая версия программы поддерживает локальный запуск языковых моделей на нейронном процессоре ноутбука.",
)
