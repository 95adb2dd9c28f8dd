"""What a KerasEstimator sends to its ranks and to Spark's prediction tasks:
the model as JSON plus its weights, and the optimizer, loss and metrics as
Keras configs. Plain data, so it pickles without the driver's Keras objects
(a compiled model or a live optimizer holds TensorFlow state that does not)."""
import hashlib


def model_spec(model, custom_objects=None):
    """The model's architecture and weights (a Sequential or functional model;
    a subclassed one needs its classes in custom_objects)."""
    return {"json": model.to_json(), "weights": [w.copy() for w in model.get_weights()],
            "custom_objects": dict(custom_objects or {})}


def rebuild_model(spec):
    import keras
    model = keras.models.model_from_json(spec["json"], custom_objects=spec["custom_objects"])
    model.set_weights(spec["weights"])
    return model


def serialize_compile(optimizer, loss, metrics):
    """The optimizer, loss and metrics as configs: a name or a Keras object each."""
    import keras
    return {"optimizer": keras.optimizers.serialize(keras.optimizers.get(optimizer)),
            "loss": _serialize_each(loss, keras.losses.serialize),
            "metrics": [_serialize_each(m, keras.metrics.serialize) for m in metrics or []]}


def deserialize_compile(config, custom_objects):
    import keras
    optimizer = keras.optimizers.deserialize(config["optimizer"], custom_objects=custom_objects)
    loss = _deserialize_each(config["loss"], keras.losses.deserialize, custom_objects)
    metrics = [_deserialize_each(m, keras.metrics.deserialize, custom_objects)
               for m in config["metrics"]]
    return optimizer, loss, metrics


def trainable_weights(model):
    """The weights training keeps equal on every rank (broadcast, then
    updated with averaged gradients). Moving statistics (BatchNormalization's
    mean and variance) are not among them: each rank updates its own from
    its own batches, as in Horovod (SyncBatchNormalization aside)."""
    import keras
    return [keras.ops.convert_to_numpy(v) for v in model.trainable_weights]


def weights_digest(weights):
    """One string per set of weights: equal on ranks whose weights are equal."""
    digest = hashlib.sha256()
    for w in weights:
        digest.update(w.tobytes())
    return digest.hexdigest()


def _serialize_each(value, serialize):
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, (list, tuple)):
        return [_serialize_each(v, serialize) for v in value]
    if isinstance(value, dict):
        return {k: _serialize_each(v, serialize) for k, v in value.items()}
    return {"keras_object": serialize(value)}


def _deserialize_each(value, deserialize, custom_objects):
    if isinstance(value, dict) and set(value) == {"keras_object"}:
        return deserialize(value["keras_object"], custom_objects=custom_objects)
    if isinstance(value, list):
        return [_deserialize_each(v, deserialize, custom_objects) for v in value]
    if isinstance(value, dict):
        return {k: _deserialize_each(v, deserialize, custom_objects) for k, v in value.items()}
    return value
