"""shard_state=True: each rank keeps the optimizer's state for its share of the parameters only.

The plan (_shard_plan) gives rank r contiguous row ranges of the trainable
variables ("pieces"). The user's optimizer class is built on this rank's
pieces only, so its slots (Adam's m and v, momentum, ...) are 1/n of the
model. A step:

1. each piece takes its rows from the model's variable (the model is the
   truth: set_weights, load_weights or a broadcast between steps are seen);
2. dense gradients, laid out as [rank 0's rows | rank 1's rows | ...], each
   part padded to the largest, go through one reduce-scatter per dtype:
   every rank receives exactly its rows, reduced;
3. sparse (IndexedSlices) gradients are gathered as the unsharded path does
   and each rank keeps the rows inside its pieces, so Keras's sparse update
   math is unchanged;
4. the user's optimizer applies those gradients to the pieces;
5. one allgather per dtype of every rank's updated pieces rebuilds the full
   variables, assigned to the model: every rank ends the step with the same
   weights.

Reduce-scatter plus allgather move the bytes of one allreduce. Only
optimizers whose update is elementwise can be cut this way; the others, and
the options this step does not cover yet, are refused at construction
(docs/sharded-state.md).
"""
import tensorflow as tf

from tf_ring.collectives import ops
from tf_ring.collectives.exchange import reducescatter
from tf_ring.keras._shard_plan import ShardPlan
from tf_ring.runtime import topology
from tf_ring.runtime.process_set import global_process_set
from tf_ring.training.gradient_reduction import to_dense

# Keras 3 optimizers whose update of an element reads only that element's
# parameter, gradient and slots (plus scalars such as the step count).
ELEMENTWISE = ("SGD", "Adam", "AdamW", "Adamax", "Nadam", "RMSprop", "Adagrad", "Adadelta",
               "Lion", "Ftrl")

DOC = "docs/sharded-state.md"


def _refuse(why):
    raise ValueError("tf_ring.keras.DistributedOptimizer(shard_state=True): %s (see %s)"
                     % (why, DOC))


def check_can_shard(optimizer, op, compression, backward_passes_per_step, process_set):
    """Raises ValueError, saying why, for an optimizer or option (as given to
    DistributedOptimizer) that sharded state cannot serve, or not yet."""
    import keras
    cls = type(optimizer)
    if not isinstance(optimizer, keras.optimizers.Optimizer):
        _refuse("takes a Keras 3 optimizer (keras.optimizers); %s is not one. The tf_keras "
                "(Keras 2) optimizers are not sharded yet" % cls.__qualname__)
    if isinstance(optimizer, keras.optimizers.LossScaleOptimizer):
        _refuse("mixed precision (LossScaleOptimizer) is not supported with sharded state yet")
    if cls.__name__ not in ELEMENTWISE or getattr(keras.optimizers, cls.__name__, None) is not cls:
        _refuse("%s cannot be sharded: only optimizers whose update is elementwise can be cut "
                "into row ranges, and tf_ring knows that only of Keras's %s. Optimizers with "
                "per-tensor norms or factored state (Adafactor, Lamb, Muon, ...), and subclasses, "
                "whose update tf_ring cannot inspect, would change their math"
                % (cls.__qualname__, ", ".join(ELEMENTWISE)))
    if optimizer.clipnorm or optimizer.global_clipnorm:
        _refuse("clipnorm and global_clipnorm need each variable's (or all variables') whole "
                "gradient norm, which no rank holds; clipvalue is elementwise and works")
    if optimizer.use_ema:
        _refuse("use_ema is not supported with sharded state yet")
    if optimizer.gradient_accumulation_steps:
        _refuse("the optimizer's gradient_accumulation_steps is not supported with sharded "
                "state yet")
    if op == ops.Adasum:
        _refuse("Adasum combines whole gradients by their dot products and norms, which needs "
                "every rank to see whole tensors: it has no reduce-scatter")
    if hasattr(compression, "reduce_gradients"):
        _refuse("PowerSGD compresses each whole gradient matrix into low-rank factors that are "
                "allreduced whole: there is no per-rank share of its result to scatter")
    if int(backward_passes_per_step) > 1:
        _refuse("backward_passes_per_step > 1 is not supported with sharded state yet")
    if process_set is not global_process_set:
        _refuse("process sets are not supported with sharded state yet; shard over all ranks")


def refuse_local_variables():
    _refuse("local variables (register_local_var, PartialDistributedOptimizer) are not "
            "supported with sharded state yet")


def refuse_loss_scaling():
    _refuse("mixed precision (a LossScaleOptimizer around this optimizer, which "
            "model.compile adds under the mixed_float16 policy) is not supported with sharded "
            "state yet; train in float32")


def refuse_saving(rank, size):
    raise ValueError(
        "tf_ring: this optimizer's state is sharded (DistributedOptimizer(shard_state=True)): "
        "rank %d holds only its 1/%d share of it, so saving the optimizer's variables here "
        "(model.save, model.save_weights, ModelCheckpoint) would write a partial state; the "
        "file Keras had begun holds no optimizer state and should be deleted. "
        "Save the model's weights without the optimizer instead, e.g. "
        "numpy.savez(path, *model.get_weights()) on rank 0; a checkpoint of the whole "
        "sharded state written by every rank is not available yet (%s)" % (rank, size, DOC))


class ShardedState:
    """The plan, this rank's pieces, and the keys of this rank's own slots."""

    def __init__(self, reducer):
        self.reducer = reducer
        self.plan = None
        self.variables = None
        self.pieces = None      # this rank's piece variables, parallel to plan.pieces(rank)
        self.rank = None
        self.own_keys = set()   # ids of the slot variables made from a piece
        self._piece_keys = set()

    # -- build ---------------------------------------------------------------

    def build(self, optimizer, base, variables):
        """Plans the variables' shares; builds `base` (the user's class) on this rank's pieces."""
        import keras
        self.variables = list(variables)
        self.rank, size = topology.rank(), topology.size()
        self.plan = ShardPlan([tuple(v.shape) for v in self.variables],
                              [_dtype_name(v.dtype) for v in self.variables], size)
        with tf.init_scope():
            self.pieces = [
                keras.Variable(initializer="zeros", shape=p.shape,
                               dtype=self.variables[p.index].dtype, trainable=True,
                               name=_leaf_name(self.variables[p.index]))
                for p in self.plan.pieces(self.rank)]
        self._piece_keys = {id(v) for v in self.pieces}
        _carry_weight_decay_exclusions(optimizer, self.plan.pieces(self.rank), self.pieces,
                                       self.variables)
        base.build(optimizer, list(self.pieces))

    def note_slot(self, reference, slot):
        """Records a slot variable made from one of the pieces: this rank's own."""
        if id(reference) in self._piece_keys:
            self.own_keys.add(id(slot))

    # -- a step --------------------------------------------------------------

    def apply(self, optimizer, base, grads, trainable_variables):
        import keras
        if trainable_variables is None:
            if not optimizer.built:
                raise ValueError("When passing `grads` without `variables`, the optimizer must "
                                 "already be built: call optimizer.build(trainable_variables)")
            variables = self.variables
        else:
            variables = list(trainable_variables)
            if not optimizer.built:
                with keras.name_scope(optimizer.name, caller=optimizer):
                    optimizer.build(variables)
        grads = list(grads)
        if len(grads) != len(variables):
            raise ValueError("tf_ring sharded optimizer: %d gradients for %d variables"
                             % (len(grads), len(variables)))
        by_index = [None] * len(self.variables)
        position = {id(v): i for i, v in enumerate(self.variables)}
        for grad, var in zip(grads, variables):
            if id(var) not in position:
                raise ValueError("Unknown variable: %s. This optimizer (shard_state=True) was "
                                 "built on other variables; make a new optimizer for new "
                                 "variables." % (getattr(var, "path", None) or var.name,))
            by_index[position[id(var)]] = grad
        if self.reducer.settings.sparse_as_dense:
            by_index = [None if g is None else to_dense(g) for g in by_index]
        mine = self.plan.pieces(self.rank)
        for piece, var in zip(mine, self.pieces):
            var.assign(_rows_view(self.variables[piece.index])[piece.row_start:piece.row_stop])
        # Every collective's result, used or not here: a rank that owns none
        # of a reduce-scatter's or sparse gather's rows must still run it,
        # and a graph would prune an op whose result nothing reads.
        issued = []
        piece_grads = self._scatter_dense(by_index, mine, issued)
        piece_grads.update(self._own_sparse_rows(by_index, mine, issued))
        applied = [(piece_grads[i], self.pieces[i]) for i in range(len(mine)) if i in piece_grads]
        if applied:
            base.apply(optimizer, [g for g, _ in applied], [v for _, v in applied])
        else:
            optimizer._iterations.assign_add(1)  # base.apply counts a step; nothing to apply here
        self._gather_into_model(by_index, issued)

    def _scatter_dense(self, by_index, mine, issued):
        """{position in `mine`: that piece's reduced dense gradient}; a reduce-scatter per dtype."""
        s = self.reducer.settings
        out = {}
        for g, group in enumerate(self.plan.groups):
            def dense(piece):
                grad = by_index[piece.index]
                return grad is not None and not isinstance(grad, tf.IndexedSlices)
            members = set(group.indices)
            counts = [sum(p.size for p in seg if dense(p)) for seg in group.segments]
            width = max(counts)
            if width == 0:
                continue
            dtype = self.variables[group.indices[0]].dtype
            parts = []
            for seg, count in zip(group.segments, counts):
                for p in seg:
                    if dense(p):
                        rows = _rows_view(tf.cast(by_index[p.index], dtype))
                        parts.append(tf.reshape(rows[p.row_start:p.row_stop], [-1]))
                if count < width:
                    parts.append(tf.zeros([width - count], dtype))
            received = reducescatter(tf.concat(parts, 0), compression=s.compression, op=s.op,
                                     prescale_factor=s.prescale, postscale_factor=s.postscale,
                                     name=_name("grads.%d" % g))
            issued.append(received)
            offset = 0
            for i, p in enumerate(mine):
                if p.index in members and dense(p):
                    out[i] = tf.reshape(received[offset:offset + p.size], p.shape)
                    offset += p.size
        return out

    def _own_sparse_rows(self, by_index, mine, issued):
        """{position in `mine`: the gathered sparse rows that fall in that piece}."""
        sparse = [i for i, g in enumerate(by_index) if isinstance(g, tf.IndexedSlices)]
        if not sparse:
            return {}
        reduced = self.reducer.reduce([by_index[i] for i in sparse],
                                      [self.variables[i] for i in sparse])
        gathered = dict(zip(sparse, reduced))
        issued.extend(t for g in reduced for t in (g.values, g.indices))
        out = {}
        for i, p in enumerate(mine):
            grad = gathered.get(p.index)
            if grad is None:
                continue
            indices = tf.cast(grad.indices, tf.int64)
            keep = tf.logical_and(indices >= p.row_start, indices < p.row_stop)
            out[i] = tf.IndexedSlices(tf.boolean_mask(grad.values, keep),
                                      tf.boolean_mask(indices, keep) - p.row_start,
                                      tf.constant(p.shape, tf.int64))
        return out

    def _gather_into_model(self, by_index, issued):
        """Every rank's updated pieces, one allgather per dtype, assigned to the
        model's variables; the allgathers wait for the `issued` collectives."""
        mine = self.plan.pieces(self.rank)
        piece_var = {id(p): v for p, v in zip(mine, self.pieces)}
        size = self.plan.size
        for g, group in enumerate(self.plan.groups):
            def updated(piece):
                return by_index[piece.index] is not None
            counts = [sum(p.size for p in seg if updated(p)) for seg in group.segments]
            width = max(counts)
            if width == 0:
                continue
            dtype = self.variables[group.indices[0]].dtype
            parts = [tf.reshape(tf.convert_to_tensor(piece_var[id(p)]), [-1])
                     for p in group.segments[self.rank] if updated(p)]
            if counts[self.rank] < width:
                parts.append(tf.zeros([width - counts[self.rank]], dtype))
            with tf.control_dependencies(issued):
                mine_flat = tf.concat(parts, 0)
            everyone = tf.reshape(ops.allgather(mine_flat, name=_name("weights.%d" % g)),
                                  [size, width])
            rows = {}
            for r, seg in enumerate(group.segments):
                offset = 0
                for p in seg:
                    if updated(p):
                        rows.setdefault(p.index, []).append(
                            tf.reshape(everyone[r, offset:offset + p.size], p.shape))
                        offset += p.size
            for index, parts_of_var in rows.items():
                var = self.variables[index]
                var.assign(tf.reshape(tf.concat(parts_of_var, 0), var.shape))


def own_keys(optimizer):
    """Ids of `optimizer`'s variables that differ per rank (its sharded slots); empty unsharded."""
    settings = getattr(optimizer, "_tf_ring_settings", None)
    sharded = getattr(settings, "sharded", None)
    return set() if sharded is None else set(sharded.own_keys)


def _carry_weight_decay_exclusions(optimizer, pieces, piece_vars, variables):
    """exclude_from_weight_decay(var_list=...) names model variables: so are their pieces."""
    excluded = getattr(optimizer, "_exclude_from_weight_decay", None)
    if not excluded:
        return
    for piece, var in zip(pieces, piece_vars):
        if optimizer._var_key(variables[piece.index]) in excluded:
            excluded.add(optimizer._var_key(var))


def _rows_view(value):
    """`value` (a tensor or variable) as rows: a scalar is one row of one element."""
    tensor = tf.convert_to_tensor(value)
    return tf.reshape(tensor, [1]) if tensor.shape.rank == 0 else tensor


def _leaf_name(var):
    return str(getattr(var, "name", "piece")).split("/")[-1].split(":")[0]


def _dtype_name(dtype):
    return tf.as_dtype(dtype).name


def _name(label):
    """The collective's name, given in graphs too: the tensors' own names
    differ between ranks whose segments have different numbers of pieces."""
    return "tf_ring.keras.sharded.%s" % label
