"""Broadcast of variables from one rank, all issued in one tf.function so they run together."""
import tensorflow as tf

from tf_ring.collectives import ops


def broadcast_variables(variables, root_rank, name_prefix, process_set=None):
    """Assigns root_rank's value to every variable in `variables` on every rank.

    Names come from the position in the list, which every rank builds in the
    same order, so the ranks' requests match.
    """
    variables = list(variables)
    if not variables:
        return

    @tf.function(autograph=False)
    def assign_from_root():
        for index, var in enumerate(variables):
            value = ops.broadcast(tf.convert_to_tensor(var), root_rank,
                                  name="%s.%d" % (name_prefix, index), process_set=process_set)
            var.assign(value)

    assign_from_root()
