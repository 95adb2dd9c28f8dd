"""tf_ring on Ray: Horovod's RayExecutor API, with ranks started through one
agent actor per machine of a placement group (docs/spark-ray-kubernetes.md).

    import ray
    from tf_ring.ray import RayExecutor

    ray.init()
    executor = RayExecutor(RayExecutor.create_settings(timeout_s=60), num_workers=4)
    executor.start()
    results = executor.run(train, args=(epochs,))
    executor.shutdown()

ray is imported when start() is called, not with this package
(pip install "tf_ring[ray]")."""
from tf_ring.ray.executor import RayExecutor, RaySettings

__all__ = ["RayExecutor", "RaySettings"]
