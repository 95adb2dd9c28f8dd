"""load_model: reload a saved model and make its optimizer a tf_ring one again."""
from tf_ring import ops
from tf_ring.keras import _flavor
from tf_ring.keras._optimizer import make_distributed_in_place


def load_model(filepath, custom_optimizers=None, custom_objects=None, compression=None,
               op=ops.Average, backward_passes_per_step=1, average_aggregated_gradients=False,
               sparse_as_dense=False, **load_kwargs):
    """Loads a model saved with model.save() by the Keras that tf.keras is in this
    process, then turns its optimizer (with its restored state) into a tf_ring
    DistributedOptimizer with the given settings.

    custom_optimizers: optimizer classes the file refers to that Keras does not know.
    """
    keras = _flavor.keras_module()
    objects = dict(custom_objects or {})
    for cls in custom_optimizers or ():
        objects[cls.__name__] = cls
    model = keras.models.load_model(filepath, custom_objects=objects or None, **load_kwargs)
    if getattr(model, "optimizer", None) is not None:
        make_distributed_in_place(model.optimizer, op=op, compression=compression,
                                  backward_passes_per_step=backward_passes_per_step,
                                  average_aggregated_gradients=average_aggregated_gradients,
                                  sparse_as_dense=sparse_as_dense)
    return model
