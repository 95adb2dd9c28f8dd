"""Training on the collectives: DistributedGradientTape, the v1
DistributedOptimizer, the session hook, the one gradient reducer they and
tf_ring.keras share, and PowerSGD, the compressor that plugs into it.
Built on tf_ring.collectives and tf_ring.runtime.
"""
