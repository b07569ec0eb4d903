"""The reranker at the edge of its length: a query that fills the pair's room is refused, one token
shorter is scored (its passage cut to what is left, with a warning).
"""

from __future__ import annotations

import pytest

from conftest import FIXTURES
from ryzenai_core import InvalidRequestError
from ryzenai_core.rerank.engine import RerankEngine

BERT = FIXTURES / "rerank" / "tiny-bert-cross-encoder"


def test_a_query_of_exactly_the_pairs_room_is_refused_and_one_token_less_is_scored():
    engine = RerankEngine(BERT)
    room = engine.package.max_length - engine.tokenizer.num_special_tokens_to_add(True)

    def query(n: int) -> str:
        text = " ".join(["lab"] * n)
        assert len(engine.tokenizer.encode(text, add_special_tokens=False).ids) == n
        return text

    with pytest.raises(InvalidRequestError, match=rf"the query is {room} tokens; .* no room for a passage"):
        engine.rerank(query(room), ["a passage about the lab"])
    result = engine.rerank(query(room - 1), ["a passage about the lab"])
    assert len(result.scores) == 1 and result.truncated == [0]
