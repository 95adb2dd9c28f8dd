"""load_model: reload a saved model and make its optimizer a tf_ring one again."""
from tf_ring.collectives import ops
from tf_ring.collectives.compression import Compression
from tf_ring.keras import _flavor
from tf_ring.keras._optimizer import make_distributed_in_place
from tf_ring.runtime.process_set import global_process_set
from tf_ring.training.tape import local_layer_variables


def load_model(filepath, custom_optimizers=None, custom_objects=None, compression=Compression.none,
               op=ops.Average, backward_passes_per_step=1, average_aggregated_gradients=False,
               sparse_as_dense=False, gradient_predivide_factor=1.0, num_groups=0, groups=None,
               scale_local_gradients=True, process_set=global_process_set, local_layers=None,
               **load_kwargs):
    """Loads a model saved with model.save() by the Keras that tf.keras is in this
    process, then turns its optimizer (with its restored state) into a tf_ring
    DistributedOptimizer with the given settings.

    A saved file holds the optimizer as Keras knows it (so plain Keras loads it
    too), not tf_ring's settings: pass the DistributedOptimizer arguments the
    model trained with; they mean what they mean there.
    custom_optimizers: optimizer classes the file refers to that Keras does not know.
    local_layers: names of the loaded model's layers whose variables stay local
      (PartialDistributedOptimizer's local_layers); other local variables can
      be registered with `model.optimizer.register_local_var(var)`.
    load_kwargs: passed on to Keras's load_model (e.g. compile, safe_mode).
    """
    keras = _flavor.keras_module()
    objects = dict(custom_objects or {})
    for cls in custom_optimizers or ():
        objects[cls.__name__] = cls
    model = keras.models.load_model(filepath, custom_objects=objects or None, **load_kwargs)
    if getattr(model, "optimizer", None) is not None:
        make_distributed_in_place(
            model.optimizer, _local_variables(model, local_layers), op=op, compression=compression,
            backward_passes_per_step=backward_passes_per_step,
            average_aggregated_gradients=average_aggregated_gradients,
            sparse_as_dense=sparse_as_dense, gradient_predivide_factor=gradient_predivide_factor,
            num_groups=num_groups, groups=groups, scale_local_gradients=scale_local_gradients,
            process_set=process_set)
    elif local_layers:
        raise ValueError("load_model: local_layers given, but %s was saved without an optimizer "
                         "(or loaded with compile=False)" % (filepath,))
    return model


def _local_variables(model, names):
    if not names:
        return []
    names = [names] if isinstance(names, str) else list(names)
    known = [layer.name for layer in model.layers]
    missing = [n for n in names if not isinstance(n, str) or n not in known]
    if missing:
        raise ValueError("load_model: local_layers must name layers of the loaded model; %s not "
                         "among its layers %s" % (", ".join(map(repr, missing)), known))
    return local_layer_variables([model.get_layer(n) for n in names], "load_model")
