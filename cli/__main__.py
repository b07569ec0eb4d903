"""``python -m ryzenai_cli``: the ``ryzenai-llm`` command."""

import sys

from .main import main

sys.exit(main())
