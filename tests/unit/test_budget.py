from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ryzenai_core import ContextBudget, ContextWindowExceededError, InvalidRequestError
from ryzenai_core.package.budget import BUCKET_STEP

QWEN_PREFILL = (128, 256, 512, 768, 1024, 1536, 2048, 2304, 3072, 4096)
QWEN_DECODE = (256, 512, 1024, 2048, 3072, 4096)


def npu_4k() -> ContextBudget:
    return ContextBudget(window=4096, prompt_limit=4096, prefill_buckets=QWEN_PREFILL, decode_buckets=QWEN_DECODE)


def test_1030_tokens_cost_a_1536_bucket():
    plan = npu_4k().plan(1030, 100)
    assert plan.prefill_bucket == 1536 and plan.padding == 506
    assert plan.max_new_tokens == 100 and not plan.clamped
    assert plan.decode_buckets == [2048]


def test_exact_bucket_has_no_padding():
    plan = npu_4k().plan(2304, 10)
    assert (plan.prefill_bucket, plan.padding) == (2304, 0)


def test_output_is_clamped_and_reported():
    plan = npu_4k().plan(4000, 500)
    assert plan.max_new_tokens == 96 and plan.clamped and plan.requested_new_tokens == 500
    assert plan.max_length == 4096
    assert plan.decode_buckets == [4096]


def test_no_max_new_tokens_means_all_that_fit():
    plan = npu_4k().plan(100)
    assert plan.max_new_tokens == 3996 and not plan.clamped
    assert plan.decode_buckets == list(QWEN_DECODE)


def test_over_the_limit_names_counts_and_fix():
    b = ContextBudget(window=4096, prompt_limit=2048, prompt_limit_source="rai_config.json max_prompt_length['1.5.1']")
    with pytest.raises(ContextWindowExceededError) as info:
        b.plan(3000, 10)
    err = info.value
    assert (err.prompt_tokens, err.limit, err.window) == (3000, 2048, 4096)
    assert "3000" in str(err) and "2048" in str(err) and "1.5.1" in str(err) and "Shorten" in str(err)
    assert isinstance(err, ValueError)


def test_prompt_filling_the_window_leaves_no_room():
    with pytest.raises(ContextWindowExceededError, match="no room for output"):
        npu_4k().plan(4096, 1)
    assert npu_4k().plan(4095, 5).max_new_tokens == 1


def test_plain_package_has_no_buckets():
    plan = ContextBudget(window=2048, prompt_limit=2048).plan(1000, 10)
    assert (plan.prefill_bucket, plan.padding, plan.decode_buckets, plan.prefill_windows) == (None, 0, [], 1)


def test_past_the_largest_bucket_rounds_to_256():
    b = ContextBudget(window=8192, prompt_limit=8192, prefill_buckets=(128, 256, 512))
    plan = b.plan(700, 1)
    assert (plan.prefill_bucket, plan.padding) == (768, 68)


def test_windowed_prefill_for_long_context():
    b = ContextBudget(
        window=16384,
        prompt_limit=16384,
        prefill_window=4096,
        prefill_buckets=(128, 256, 512, 1024, 2048, 4096),
        decode_buckets=QWEN_DECODE,
    )
    plan = b.plan(9000, 10)
    assert plan.prefill_windows == 3
    assert plan.prefill_bucket == 1024  # the last window holds 808 tokens
    assert plan.padding == 1024 - 808


@pytest.mark.parametrize(("prompt", "new"), [(0, 1), (-3, 1), (10, 0), (10, -1)])
def test_non_positive_counts_are_rejected(prompt, new):
    with pytest.raises(InvalidRequestError, match=str(prompt if prompt < 1 else new)):
        npu_4k().plan(prompt, new)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(window=1, prompt_limit=1), "context window 1 is too small: it must be at least 2 tokens"),
        (dict(window=100, prompt_limit=200), "prompt limit 200 must be between 1 and the window (100)"),
        (
            dict(window=100, prompt_limit=50, prefill_buckets=(64, 32)),
            "prefill_buckets must be positive and strictly ascending, got [64, 32]",
        ),
    ],
)
def test_inconsistent_budgets_are_rejected(kwargs, message):
    with pytest.raises(InvalidRequestError) as info:
        ContextBudget(**kwargs)
    assert str(info.value) == message


buckets = st.lists(st.integers(1, 5000), min_size=1, max_size=12, unique=True).map(lambda v: tuple(sorted(v)))


@settings(max_examples=300, deadline=None)
@given(prefill=buckets, decode=buckets, window=st.integers(2, 20000), data=st.data())
def test_plans_are_sound_for_any_bucket_list(prefill, decode, window, data):
    limit = data.draw(st.integers(1, window))
    b = ContextBudget(window=window, prompt_limit=limit, prefill_buckets=prefill, decode_buckets=decode)
    prompt = data.draw(st.integers(1, min(limit, window - 1) if window > 1 else 1))
    if prompt >= window:
        return
    want = data.draw(st.none() | st.integers(1, 30000))
    plan = b.plan(prompt, want)
    # the bucket holds the prompt, is the smallest that does, padding = bucket - prompt
    assert plan.prefill_bucket >= prompt
    smaller = [x for x in prefill if x >= prompt]
    if smaller:
        assert plan.prefill_bucket == smaller[0]
    else:
        assert plan.prefill_bucket == max(BUCKET_STEP, math.ceil(prompt / BUCKET_STEP) * BUCKET_STEP)
        assert plan.prefill_bucket - prompt < BUCKET_STEP
    assert plan.padding == plan.prefill_bucket - prompt
    # output never overflows the window, and a clamp is always reported
    assert 1 <= plan.max_new_tokens <= window - prompt
    assert plan.prompt_tokens + plan.max_new_tokens <= window
    assert plan.clamped == (want is not None and want > plan.max_new_tokens)
    if want is not None and not plan.clamped:
        assert plan.max_new_tokens == want
    # decode buckets: ascending, only the package's, covering the history up to the largest one
    assert plan.decode_buckets == sorted(set(plan.decode_buckets)) and set(plan.decode_buckets) <= set(decode)
    history = prompt + plan.max_new_tokens
    if prompt + 1 <= decode[-1]:
        assert plan.decode_buckets[0] >= prompt + 1
    if history <= decode[-1]:
        assert plan.decode_buckets[-1] >= history and plan.decode_past_buckets == 0
    else:
        assert plan.decode_past_buckets == history - decode[-1]


@settings(max_examples=200, deadline=None)
@given(prompt=st.integers(1, 16383), pw=st.integers(1, 5000), data=st.data())
def test_windowed_plans_cover_the_prompt(prompt, pw, data):
    prefill = data.draw(buckets)
    b = ContextBudget(window=16384, prompt_limit=16384, prefill_window=pw, prefill_buckets=prefill)
    plan = b.plan(prompt, 1)
    assert plan.prefill_windows == math.ceil(prompt / pw)
    last = prompt - (plan.prefill_windows - 1) * pw
    assert 1 <= last <= pw
    assert plan.prefill_bucket >= last
    assert plan.padding >= plan.prefill_bucket - last


def test_no_plan_names_a_decode_bucket_past_the_largest():
    """A 6,000-token prompt on a package whose token buckets stop at 4096 passes no 6144 bucket."""
    b = ContextBudget(window=16384, prompt_limit=16383, decode_buckets=(256, 512, 1024, 2048, 4096))
    plan = b.plan(3900, 400)
    assert plan.decode_buckets == [4096] and plan.decode_past_buckets == 204
    far = b.plan(6000, 200)
    assert far.decode_buckets == [] and far.decode_past_buckets == 2104
    assert far.to_dict()["decode_past_buckets"] == 2104


def test_estimated_prefill_buckets_mark_the_plan():
    b = ContextBudget(window=4096, prompt_limit=4095, prefill_buckets=(128, 4096), prefill_buckets_estimated=True)
    assert b.plan(100, 1).prefill_bucket_estimated
    assert (
        not ContextBudget(window=4096, prompt_limit=4095, prefill_buckets=(128, 4096))
        .plan(100, 1)
        .prefill_bucket_estimated
    )
