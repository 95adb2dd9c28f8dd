"""broadcast_variables: make variables equal to the root rank's values."""
import tensorflow as tf

from tf_ring.ops import broadcast


def broadcast_variables(variables, root_rank):
    """Assigns root_rank's value to every variable in `variables`.

    Eagerly the assignment happens now and None is returned; in a graph
    (tf.function or tf.compat.v1) the grouped assign op is returned.
    """
    variables = list(variables)
    if tf.executing_eagerly():
        for var in variables:
            var.assign(broadcast(tf.convert_to_tensor(var), root_rank))
        return None
    return tf.group(*[var.assign(broadcast(tf.convert_to_tensor(var), root_rank))
                      for var in variables])
