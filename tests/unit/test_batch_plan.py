"""The encoder's batch planner: pure, no model. Dynamic runs end where lengths jump; static runs keep their buckets."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ryzenai_core.embeddings.batches import MAX_PADDING, PADDING_SLACK, plan_batches


def _padding(lengths: list[int], indices: tuple[int, ...], length: int) -> int:
    return len(indices) * length - sum(lengths[i] for i in indices)


def test_one_long_text_among_short_ones_runs_on_its_own():
    lengths = [20] * 15 + [500] + [20] * 16  # 31 short passages and a long one, in the middle
    batches = plan_batches(lengths, batch_size=32)
    assert [(len(b.indices), b.length) for b in batches] == [(31, 20), (1, 500)]
    assert batches[1].indices == (15,)
    assert sum(_padding(lengths, b.indices, b.length) for b in batches) == 0
    # as it was: one run of 32 rows padded to 500 tokens, 24.7x the tokens of the texts
    (old,) = plan_batches(lengths, batch_size=32, max_padding=None)
    assert (len(old.indices), old.length) == (32, 500) and _padding(lengths, old.indices, old.length) == 32 * 500 - 1120


def test_texts_of_nearly_one_length_fill_whole_batches():
    lengths = [100 + i % 8 for i in range(64)]
    assert [len(b.indices) for b in plan_batches(lengths, batch_size=32)] == [32, 32]
    short = [3] * 20 + [3 + PADDING_SLACK]  # a few tokens apart: the slack keeps them in one run
    assert len(plan_batches(short, batch_size=32)) == 1


def test_lengths_that_grow_steadily_split_into_runs_of_bounded_padding():
    lengths = list(range(10, 330, 10))  # 32 texts, 10 to 320 tokens
    batches = plan_batches(lengths, batch_size=32)
    assert 2 < len(batches) < 10
    old_padding = 32 * 320 - sum(lengths)
    assert sum(_padding(lengths, b.indices, b.length) for b in batches) < old_padding / 2


def test_max_padding_none_groups_by_batch_size_alone_and_static_runs_keep_their_buckets():
    lengths = [40, 5, 17, 130, 9]
    assert [b.indices for b in plan_batches(lengths, batch_size=2, max_padding=None)] == [(1, 4), (2, 0), (3,)]
    static = plan_batches(lengths, batch_size=8, buckets=[16, 64, 256], static_rows=2, max_padding=0.0)
    assert [(b.indices, b.rows, b.length) for b in static] == [((1, 4), 2, 16), ((2, 0), 2, 64), ((3,), 2, 256)]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(1, 512), max_size=80), st.integers(1, 40))
def test_every_text_runs_once_in_length_order_with_padding_bounded(lengths, batch_size):
    batches = plan_batches(lengths, batch_size=batch_size)
    order = [i for b in batches for i in b.indices]
    assert sorted(order) == list(range(len(lengths)))  # every text once
    assert order == sorted(range(len(lengths)), key=lambda i: (lengths[i], i))  # runs follow the sorted order
    for b in batches:
        real = sum(lengths[i] for i in b.indices)
        assert b.rows == len(b.indices) <= batch_size and b.length == max(lengths[i] for i in b.indices)
        assert b.rows * b.length - real <= max(MAX_PADDING * real, PADDING_SLACK * b.rows)
    # a run ends early only where the next text would break the bound
    for b, after in zip(batches, batches[1:], strict=False):
        if len(b.indices) < batch_size:
            n = lengths[after.indices[0]]
            rows, real = len(b.indices) + 1, sum(lengths[i] for i in b.indices) + n
            assert rows * n - real > max(MAX_PADDING * real, PADDING_SLACK * rows)


def test_a_batch_size_below_one_is_refused():
    from ryzenai_core import InvalidRequestError

    with pytest.raises(InvalidRequestError, match="batch_size is 0"):
        plan_batches([1, 2], batch_size=0)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(1, 256), max_size=60), st.integers(1, 8))
def test_inputs_up_to_the_cpu_limit_run_dynamic_and_the_rest_keep_their_buckets(lengths, batch_size):
    # An NPU engine's small inputs go to its CPU session (dynamic runs); the others to static buckets.
    batches = plan_batches(lengths, batch_size=batch_size, buckets=[64, 128, 256], static_rows=1, dynamic_up_to=32)
    assert sorted(i for b in batches for i in b.indices) == list(range(len(lengths)))  # every text once
    for b in batches:
        small = [lengths[i] <= 32 for i in b.indices]
        assert all(small) if b.dynamic else not any(small)
        if b.dynamic:
            assert b.shape is None and b.rows == len(b.indices) <= batch_size
        else:
            assert b.shape == (1, b.length) and b.length in (64, 128, 256) and len(b.indices) == 1
    assert [b.dynamic for b in batches] == sorted((b.dynamic for b in batches), reverse=True)  # small ones first
    whole = plan_batches(lengths, batch_size=batch_size, buckets=[64, 128, 256], static_rows=1)
    assert not any(b.dynamic for b in whole)  # without the limit every text takes a bucket
