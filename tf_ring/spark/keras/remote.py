"""The function a KerasEstimator runs on every rank (through
tf_ring.spark.run): rebuild the model, wrap its optimizer in
DistributedOptimizer, read this rank's Parquet files and fit for the same
number of steps as every other rank."""


def train(spec):
    import tf_ring.keras as hvd
    from tf_ring.spark.keras import shards
    from tf_ring.spark.keras import spec as specs

    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    custom_objects = spec["model"]["custom_objects"]
    model = specs.rebuild_model(spec["model"])
    optimizer, loss, metrics = specs.deserialize_compile(spec["compile"], custom_objects)
    model.compile(optimizer=hvd.DistributedOptimizer(optimizer), loss=loss, metrics=metrics)

    input_shapes = [tuple(t.shape[1:]) for t in model.inputs]
    output_shapes = [tuple(t.shape[1:]) for t in model.outputs]
    columns = spec["feature_cols"] + spec["label_cols"]

    def data(path, shuffle):
        read = shards.read_columns(shards.my_files(path, rank, size), columns)
        rows = shards.check_rows(read, columns, path, rank)
        return rows, shards.dataset(read, spec["feature_cols"], spec["label_cols"], input_shapes,
                                    output_shapes, spec["batch_size"], shuffle,
                                    spec["seed"] + rank)

    rows, train_data = data(spec["train_path"], spec["shuffle"])
    validation = {}
    if spec["val_path"]:
        _, val_data = data(spec["val_path"], False)
        validation = {"validation_data": val_data, "validation_steps": spec["validation_steps"]}
    # Rank 0's weights go to every rank first; metrics are averaged over the
    # ranks, so each rank's history (and rank 0's, returned) is the job's.
    callbacks = [hvd.callbacks.BroadcastGlobalVariablesCallback(0),
                 hvd.callbacks.MetricAverageCallback()] + list(spec["callbacks"])
    history = model.fit(train_data, steps_per_epoch=spec["steps_per_epoch"],
                        epochs=spec["epochs"], callbacks=callbacks,
                        shuffle=False,  # the pipeline shuffles (shards.dataset)
                        verbose=spec["verbose"] if rank == 0 else 0, **validation)
    # Compared across ranks: the trainable weights, which must agree. The
    # model returned is rank 0's whole state, its moving statistics included.
    return {"rank": rank, "rows": rows,
            "digest": specs.weights_digest(specs.trainable_weights(model)),
            "history": {k: [float(v) for v in vs] for k, vs in history.history.items()},
            "weights": model.get_weights() if rank == 0 else None}
