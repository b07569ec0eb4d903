"""Bucket-aware packing (ryzenai_core.package.packing): pure functions, property tests."""

from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import REPLICAS
from ryzenai_core import ContextBudget, ContextWindowExceededError, InvalidRequestError, ModelPackage
from ryzenai_core.package.budget import DEFAULT_PREFILL_BUCKETS
from ryzenai_core.package.packing import bucket_edges, pack_context, packing_limit, padded_length

QWEN_BUCKETS = (128, 256, 512, 768, 1024, 1536, 2048, 2304, 3072, 4096)
NPU = ContextBudget(window=4096, prompt_limit=4096, prefill_buckets=QWEN_BUCKETS, decode_buckets=(256, 512, 1024))


@st.composite
def budgets(draw):
    window = draw(st.integers(min_value=64, max_value=6000))
    prompt_limit = draw(st.integers(min_value=8, max_value=window))
    n = draw(st.integers(min_value=0, max_value=8))
    buckets = tuple(sorted(set(draw(st.lists(st.integers(min_value=1, max_value=window), min_size=n, max_size=n)))))
    prefill_window = None
    if buckets and draw(st.booleans()):
        prefill_window = draw(st.integers(min_value=min(32, window), max_value=window))
    return ContextBudget(
        window=window, prompt_limit=prompt_limit, prefill_window=prefill_window, prefill_buckets=buckets
    )


@st.composite
def packing_cases(draw):
    budget = draw(budgets())
    limit = packing_limit(budget)
    max_new = draw(st.one_of(st.none(), st.integers(min_value=1, max_value=max(1, budget.window - 2))))
    if max_new is not None and budget.window - max_new < 1:
        max_new = None
    cap = packing_limit(budget, max_new)
    base = draw(st.integers(min_value=1, max_value=max(1, cap)))
    candidates = draw(st.lists(st.integers(min_value=0, max_value=max(1, limit)), max_size=12))
    default_count = draw(st.one_of(st.none(), st.integers(min_value=0, max_value=len(candidates))))
    loss = draw(st.sampled_from([0.0, 0.1, 0.25, 1.0]))
    partial = draw(st.booleans())
    min_partial = draw(st.integers(min_value=1, max_value=64))
    return budget, base, candidates, default_count, max_new, loss, partial, min_partial


def _pack(case):
    budget, base, candidates, default_count, max_new, loss, partial, min_partial = case
    return pack_context(
        budget,
        base,
        candidates,
        default_count=default_count,
        max_new_tokens=max_new,
        max_context_loss=loss,
        allow_partial=partial,
        min_partial_tokens=min_partial,
    )


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(packing_cases())
def test_packed_prompt_never_exceeds_the_limit_nor_the_default_bucket(case):
    budget, base, candidates, default_count, max_new, loss, partial, min_partial = case
    plan = _pack(case)
    packed, default = plan.packed, plan.default
    # never over the limit: the prompt limit, and room for the output
    assert packed.prompt_tokens <= plan.limit <= budget.max_prompt_tokens
    if max_new is not None:
        assert packed.prompt_tokens + max_new <= budget.window
    assert default.prompt_tokens <= plan.limit
    # never a larger bucket or more padding than default packing
    assert packed.padded_tokens <= default.padded_tokens
    if default.prefill_bucket is not None:
        assert packed.prefill_bucket <= default.prefill_bucket or packed.padded_tokens < default.padded_tokens
    assert plan.padding_saved >= 0 and plan.prefill_saved >= 0
    # never much less context than the default
    assert packed.context_tokens >= (1 - loss) * default.context_tokens - 1e-9
    # the numbers add up, and agree with ContextBudget.plan
    whole = sum(candidates[i] for i in packed.selected)
    assert packed.context_tokens == whole + packed.partial_tokens
    assert packed.prompt_tokens == base + packed.context_tokens
    assert list(packed.selected) == sorted(set(packed.selected))
    if packed.partial is not None:
        assert partial and packed.partial not in packed.selected
        assert min_partial <= packed.partial_tokens < candidates[packed.partial]
    else:
        assert packed.partial_tokens == 0
    for p in (packed, default):
        real = budget.plan(p.prompt_tokens, 1)
        assert (real.padding, real.prefill_bucket) == (p.padding, p.prefill_bucket)
        assert p.padded_tokens == p.prompt_tokens + p.padding
    # the default is the ranked prefix that fits
    k = len(candidates) if default_count is None else default_count
    assert list(default.selected) == list(range(len(default.selected)))
    assert len(default.selected) <= k
    if len(default.selected) < k:
        assert base + default.context_tokens + candidates[len(default.selected)] > plan.limit
    if not budget.prefill_buckets:
        assert packed == default and plan.strategy == "default"


@settings(max_examples=200, deadline=None)
@given(budgets(), st.integers(min_value=1, max_value=6000))
def test_bucket_edges_are_exactly_where_the_padded_prefill_grows(budget, limit):
    limit = min(limit, budget.max_prompt_tokens)
    edges = bucket_edges(budget, limit)
    assert edges == sorted(set(edges)) and edges[-1] == limit and edges[0] >= 1
    brute = [n for n in range(1, limit) if padded_length(budget, n + 1) > padded_length(budget, n)] + [limit]
    if budget.prefill_buckets:
        assert edges == brute
    else:
        assert edges == [limit]


@settings(max_examples=200, deadline=None)
@given(budgets(), st.data())
def test_padded_length_matches_the_budget_plan(budget, data):
    n = data.draw(st.integers(min_value=1, max_value=budget.max_prompt_tokens))
    assert padded_length(budget, n) == n + budget.plan(n, 1).padding


def test_fill_adds_context_up_to_the_edge_of_the_same_bucket():
    # default: 100 + 3 x 300 = 1000 tokens -> bucket 1024; the reserve has room for one more 24
    plan = pack_context(NPU, 100, [300, 300, 300, 300, 30, 24], default_count=3, allow_partial=False)
    assert plan.default.prompt_tokens == 1000 and plan.default.prefill_bucket == 1024
    assert plan.strategy == "fill"
    assert plan.packed.selected == (0, 1, 2, 5) and plan.packed.prompt_tokens == 1024
    assert plan.packed.padding == 0 and plan.padding_saved == 24 and plan.prefill_saved == 0


def test_fill_cuts_the_next_node_to_land_on_the_edge():
    plan = pack_context(NPU, 100, [300, 300, 300, 300], default_count=3, min_partial_tokens=16)
    assert plan.packed.selected == (0, 1, 2) and plan.packed.partial == 3 and plan.packed.partial_tokens == 24
    assert plan.packed.prompt_tokens == 1024 and plan.strategy == "fill"
    # 24 is below the default min_partial_tokens of 32
    plan = pack_context(NPU, 100, [300, 300, 300, 300], default_count=3)
    assert plan.packed.partial is None and plan.strategy == "default"


def test_trim_a_small_spill_back_to_the_edge_below():
    # default: 100 + 4 x 232 = 1028 tokens: 4 tokens into the 1536 bucket (508 of padding)
    plan = pack_context(NPU, 100, [232, 232, 232, 232], max_context_loss=0.1)
    assert plan.default.prefill_bucket == 1536 and plan.default.padding == 508
    assert plan.strategy == "trim"
    assert plan.packed.prompt_tokens == 1024 and plan.packed.prefill_bucket == 1024
    assert plan.packed.partial == 3 and plan.packed.partial_tokens == 228
    assert plan.padding_saved == 508 and plan.prefill_saved == 512 and plan.context_added == -4


def test_a_trim_that_loses_too_much_context_is_refused():
    # going down to 1024 would drop a whole 400-token node (> 10% of the context)
    plan = pack_context(NPU, 100, [300, 300, 400], allow_partial=False, max_context_loss=0.1)
    assert plan.default.prompt_tokens == 1100 and plan.strategy == "default"
    assert plan.packed == plan.default
    plan = pack_context(NPU, 100, [300, 300, 400], allow_partial=False, max_context_loss=0.5)
    assert plan.strategy == "trim" and plan.packed.prefill_bucket <= 1024


def test_the_prompt_limit_and_output_room_are_respected():
    budget = ContextBudget(window=4096, prompt_limit=2048, prefill_buckets=QWEN_BUCKETS)
    plan = pack_context(budget, 100, [500] * 10, max_new_tokens=256)
    assert plan.limit == 2048 and plan.packed.prompt_tokens <= 2048
    plan = pack_context(NPU, 100, [500] * 10, max_new_tokens=1000)
    assert plan.limit == 3096 and plan.packed.prompt_tokens <= 3096
    assert plan.packed.prefill_bucket <= plan.default.prefill_bucket


def test_packages_without_buckets_keep_default_packing():
    plain = ContextBudget(window=4096, prompt_limit=4096)
    plan = pack_context(plain, 50, [100, 200, 300], default_count=2)
    assert plan.packed == plan.default and plan.packed.selected == (0, 1) and plan.padding_saved == 0


def test_windowed_prefill_edges():
    gemma = ContextBudget(
        window=16384, prompt_limit=16384, prefill_window=4096, prefill_buckets=DEFAULT_PREFILL_BUCKETS
    )
    edges = bucket_edges(gemma, 9000)
    assert 4096 in edges and 4096 + 128 in edges and 8192 in edges and edges[-1] == 9000
    plan = pack_context(gemma, 200, [1000] * 9, default_count=5)  # 5200 = 4096 + 1104 -> last run in 1536
    assert plan.default.padded_tokens == 4096 + 1536
    # 336 tokens less context (6.7% <= 10%) make the last run a 768 one
    assert plan.strategy == "trim" and plan.packed.prompt_tokens == 4096 + 768 and plan.packed.padding == 0
    plan = pack_context(gemma, 200, [1000] * 9, default_count=5, max_context_loss=0.05)
    assert plan.strategy == "trim" and plan.packed.prompt_tokens == 4096 + 1024 and plan.packed.padding == 0
    plan = pack_context(gemma, 200, [1000] * 9, default_count=5, max_context_loss=0.0)
    assert plan.strategy == "fill" and plan.packed.prompt_tokens == 4096 + 1536 and plan.packed.padding == 0


def test_base_prompt_over_the_limit_is_a_clear_error():
    with pytest.raises(ContextWindowExceededError, match="without any retrieved context"):
        pack_context(NPU, 4000, [10], max_new_tokens=200)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [  # the value given, then the range it must be in
        ({"base_tokens": 0, "candidates": [1]}, "base_tokens is 0; a prompt has at least 1 token"),
        ({"base_tokens": 10, "candidates": [5, -1]}, "candidate token counts must be >= 0, got [5, -1]"),
        (
            {"base_tokens": 10, "candidates": [1], "max_context_loss": 1.5},
            "max_context_loss is 1.5; use a fraction between 0 and 1",
        ),
        (
            {"base_tokens": 10, "candidates": [1], "max_new_tokens": 4096},
            "max_new_tokens=4096 leaves no room for a prompt in the window of 4096 tokens; "
            "use a value between 1 and 4095",
        ),
        (
            {"base_tokens": 10, "candidates": [1], "min_partial_tokens": 0},
            "min_partial_tokens is 0; it must be at least 1",
        ),
        ({"base_tokens": 10, "candidates": [1], "default_count": -2}, "default_count is -2; it must be >= 0"),
        ({"base_tokens": 10, "candidates": [1], "limit": 0}, "limit is 0; it must be at least 1"),
    ],
)
def test_bad_arguments_name_the_value(kwargs, message):
    with pytest.raises(InvalidRequestError, match=re.escape(message)):
        pack_context(NPU, **kwargs)


def test_a_replica_budget_packs_on_its_real_buckets():
    budget = ModelPackage.open(REPLICAS / "Qwen3-4B_rai_1.8.0_npu_4K").budget
    assert budget.prefill_buckets == QWEN_BUCKETS
    plan = pack_context(budget, 180, [260, 240, 250, 255, 230, 245, 270], default_count=4)
    assert plan.default.prompt_tokens == 1185 and plan.default.prefill_bucket == 1536
    assert plan.packed.prompt_tokens == 1536 and plan.packed.padding == 0 and plan.strategy == "fill"
    assert plan.to_dict()["padding_saved"] == plan.padding_saved == 351
