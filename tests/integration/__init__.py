"""Integration tier: tf_ring.spark on a Spark local-cluster and tf_ring.ray on a
local Ray, each driven from a process of its own."""
