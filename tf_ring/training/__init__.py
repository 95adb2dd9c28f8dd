"""Training on the collectives: DistributedGradientTape, the v1
DistributedOptimizer, the session hook, and the one gradient reducer they
and tf_ring.keras share. Built on tf_ring.collectives and tf_ring.runtime.
"""
