"""Which rows of which variables each rank owns when optimizer state is sharded.

Pure arithmetic on shapes (no TensorFlow), so every rank computes the same
plan from the same variable list. Variables of one dtype are viewed as one
sequence of rows in the order Keras lists them (a variable's rows run along
its first dimension; a scalar is one row of one element). That sequence is
cut into `size` contiguous segments at row boundaries, each cut at the row
boundary nearest to an even share of the elements, so no segment is off its
share by more than one row. Rank r owns segment r: for each variable the
segment touches, one contiguous row range of it (a Piece). Row-aligned
pieces keep an Embedding's sparse gradient (whole rows) exact on a piece.
"""
import numpy as np


class Piece:
    """Rows [row_start, row_stop) of variable `index` (its position in the
    plan's variable list), and where they sit in their rank's flat segment."""

    def __init__(self, index, row_start, row_stop, row_shape, offset):
        self.index, self.row_start, self.row_stop = index, row_start, row_stop
        self.row_shape = tuple(row_shape)
        self.offset = offset  # elements before it in its rank's segment

    @property
    def shape(self):
        return (self.row_stop - self.row_start,) + self.row_shape

    @property
    def size(self):
        return (self.row_stop - self.row_start) * int(np.prod(self.row_shape, dtype=np.int64))

    def __repr__(self):
        return "Piece(var %d, rows %d:%d)" % (self.index, self.row_start, self.row_stop)


class DtypeGroup:
    """The variables of one dtype and each rank's pieces of them."""

    def __init__(self, dtype, indices, segments):
        self.dtype = dtype
        self.indices = indices    # positions in the plan's variable list, in order
        self.segments = segments  # segments[r]: rank r's pieces, in variable order

    def segment_size(self, rank):
        return sum(p.size for p in self.segments[rank])

    @property
    def padded_size(self):
        """The largest segment's element count: every rank's slot in the collectives."""
        return max(self.segment_size(r) for r in range(len(self.segments)))


class ShardPlan:
    """shapes, dtypes: the variables' (in Keras's order); size: ranks."""

    def __init__(self, shapes, dtypes, size):
        self.shapes = [tuple(int(d) for d in s) for s in shapes]
        self.dtypes = list(dtypes)
        self.size = int(size)
        order = []
        for dtype in self.dtypes:
            if dtype not in order:
                order.append(dtype)
        self.groups = [self._group(dtype) for dtype in order]

    def _group(self, dtype):
        indices = [i for i, d in enumerate(self.dtypes) if d == dtype]
        rows = [_rows(self.shapes[i]) for i in indices]
        row_sizes = [_row_size(self.shapes[i]) for i in indices]
        # Element offset of every row boundary in the group's row sequence.
        ends = [np.zeros(1, np.int64)]
        start = 0
        for count, width in zip(rows, row_sizes):
            ends.append(start + width * np.arange(1, count + 1, dtype=np.int64))
            start += count * width
        bounds = np.concatenate(ends)
        cuts = [0]
        for k in range(1, self.size):
            target = start * k / self.size
            at = int(np.searchsorted(bounds, target))
            nearest = [j for j in (at - 1, at) if 0 <= j < len(bounds)]
            best = min(nearest, key=lambda j: abs(bounds[j] - target))
            cuts.append(max(int(bounds[best]), cuts[-1]))
        cuts.append(int(start))
        segments = []
        for r in range(self.size):
            lo, hi = cuts[r], cuts[r + 1]
            pieces, var_start, offset = [], 0, 0
            for index, count, width in zip(indices, rows, row_sizes):
                var_stop = var_start + count * width
                if lo < var_stop and hi > var_start and width > 0:
                    first = (max(lo, var_start) - var_start) // width
                    last = (min(hi, var_stop) - var_start) // width
                    if last > first:
                        piece = Piece(index, first, last, _row_shape(self.shapes[index]), offset)
                        pieces.append(piece)
                        offset += piece.size
                var_start = var_stop
            segments.append(pieces)
        return DtypeGroup(dtype, indices, segments)

    def pieces(self, rank):
        """Rank `rank`'s pieces over all groups."""
        return [p for g in self.groups for p in g.segments[rank]]

    def elements(self, rank):
        """How many parameter elements rank `rank` owns."""
        return sum(p.size for p in self.pieces(rank))

    def imbalance(self):
        """The largest rank's elements over the even share, minus 1 (0.03: 3% over)."""
        total = sum(self.elements(r) for r in range(self.size))
        if total == 0:
            return 0.0
        return max(self.elements(r) for r in range(self.size)) * self.size / total - 1.0


def _rows(shape):
    return shape[0] if shape else 1


def _row_shape(shape):
    return shape[1:] if shape else ()


def _row_size(shape):
    return int(np.prod(_row_shape(shape), dtype=np.int64))
