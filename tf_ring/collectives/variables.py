"""Making variables equal to the root rank's values: broadcast_variables,
broadcast_ (in place, returning the new values) and broadcast_global_variables."""
import tensorflow as tf

from tf_ring.collectives._eager_names import eager_name
from tf_ring.collectives.ops import broadcast
from tf_ring.runtime.process_set import global_process_set


def broadcast_variables(variables, root_rank, process_set=global_process_set):
    """Assigns root_rank's value to every variable in `variables` (on the
    ranks of `process_set`; root_rank is a global rank in it).

    Eagerly the assignment happens now and None is returned; in a graph
    (tf.function or tf.compat.v1) the grouped assign op is returned.
    """
    variables = list(variables)
    if tf.executing_eagerly():
        for var in variables:
            var.assign(broadcast(tf.convert_to_tensor(var), root_rank, process_set=process_set))
        return None
    return tf.group(*[var.assign(broadcast(tf.convert_to_tensor(var), root_rank,
                                           process_set=process_set))
                      for var in variables])


def broadcast_(variables, root_rank, name=None, process_set=global_process_set):
    """Broadcasts root_rank's values into `variables` in place and returns
    their new values (a list of tensors, in the order given).

    Each variable is its own collective, named after `name` (or "broadcast_",
    with the thread's name outside the main thread) and its position in the
    list, so every rank must pass the same variables in the same order.
    Works eagerly, in tf.function and in v1 graphs.
    """
    if isinstance(variables, tf.Variable):
        variables = [variables]
    variables = list(variables)
    prefix = name or (eager_name("broadcast_", "") if tf.executing_eagerly() else None)

    def collective_name(index):
        return "%s.%d" % (prefix, index) if prefix else None

    assigns = [var.assign(broadcast(tf.convert_to_tensor(var), root_rank,
                                    name=collective_name(index), process_set=process_set))
               for index, var in enumerate(variables)]
    if tf.executing_eagerly():
        return [var.read_value() for var in variables]
    with tf.control_dependencies(assigns):
        return [var.read_value() for var in variables]


def broadcast_global_variables(root_rank):
    """Returns an op that assigns root_rank's value to every global variable
    (tf.compat.v1 graphs; run it once after initialization or restore).

    Eager TensorFlow keeps no collection of global variables, so calling this
    eagerly raises RuntimeError, as in Horovod.
    """
    if tf.executing_eagerly():
        raise RuntimeError(
            "tf_ring.broadcast_global_variables(root_rank) works only in graph mode "
            "(tf.compat.v1 graphs): eager TensorFlow has no global variables to find. "
            "Eagerly, broadcast the variables themselves: "
            "tf_ring.broadcast_variables(model.variables + optimizer.variables, root_rank), "
            "or use tf_ring.keras.callbacks.BroadcastGlobalVariablesCallback with model.fit().")
    return broadcast_variables(tf.compat.v1.global_variables(), root_rank)
