"""The sharded optimizer's plan (tf_ring/keras/_shard_plan.py): pure arithmetic, no ranks."""
import numpy as np
import pytest

from tf_ring.keras._shard_plan import ShardPlan


def _covered(plan):
    """Every row of every variable, by which rank owns it (-1: nobody)."""
    owner = [np.full(s[0] if s else 1, -1) for s in plan.shapes]
    for r in range(plan.size):
        for p in plan.pieces(r):
            assert (owner[p.index][p.row_start:p.row_stop] == -1).all(), "a row owned twice"
            owner[p.index][p.row_start:p.row_stop] = r
    return owner


@pytest.mark.parametrize("size", [1, 2, 3, 4, 7])
def test_every_row_is_owned_once_and_segments_are_contiguous(size):
    shapes = [(256, 512), (512,), (512, 512), (512,), (512, 10), (10,), ()]
    plan = ShardPlan(shapes, ["float32"] * len(shapes), size)
    owner = _covered(plan)
    flat = np.concatenate(owner)
    assert (flat >= 0).all()
    assert (np.diff(flat) >= 0).all(), "ranks own contiguous, ordered segments"
    total = sum(int(np.prod(s)) for s in shapes)
    assert sum(plan.elements(r) for r in range(size)) == total
    # Cut at the row nearest an even share: off by at most one 512-element row.
    assert max(abs(plan.elements(r) - total / size) for r in range(size)) <= 512
    assert plan.imbalance() < 0.01


def test_offsets_lay_pieces_out_in_order():
    plan = ShardPlan([(10, 3), (7,), (4, 2, 2)], ["float32"] * 3, 3)
    for r in range(3):
        offset = 0
        for p in plan.pieces(r):
            assert p.offset == offset
            offset += p.size
        assert offset == plan.groups[0].segment_size(r)
    assert plan.groups[0].padded_size == max(plan.elements(r) for r in range(3))


def test_a_scalar_is_one_row_and_pieces_keep_the_row_shape():
    plan = ShardPlan([(), (6, 2, 3)], ["float32"] * 2, 2)
    pieces = plan.pieces(0) + plan.pieces(1)
    assert [p.shape for p in pieces if p.index == 0] == [(1,)]
    assert all(p.shape[1:] == (2, 3) for p in pieces if p.index == 1)


def test_dtypes_are_planned_apart():
    plan = ShardPlan([(8, 4), (8,), (6, 4)], ["float32", "float64", "float32"], 2)
    assert [g.dtype for g in plan.groups] == ["float32", "float64"]
    assert plan.groups[0].indices == [0, 2] and plan.groups[1].indices == [1]
    assert [plan.groups[1].segment_size(r) for r in range(2)] == [4, 4]
    assert [plan.groups[0].segment_size(r) for r in range(2)] == [28, 28]


def test_more_ranks_than_rows_leaves_some_ranks_without_pieces():
    plan = ShardPlan([(2, 5)], ["float32"], 4)
    owner = _covered(plan)
    assert sorted(set(owner[0].tolist())) == sorted(set(owner[0].tolist()) - {-1})
    assert sum(1 for r in range(4) if not plan.pieces(r)) == 2
