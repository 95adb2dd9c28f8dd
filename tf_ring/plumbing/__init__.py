"""The floor below the launcher (tf_ring.run), the elastic driver, the ranks
(tf_ring.elastic) and hosted jobs (tf_ring.hosted): what more than one of
them needs and none of them owns. Environment variable names and exit
codes (env_names), the control wire, channel authentication (handshake,
sealed frames, endpoints, the authenticated server), host names, interface
addresses, private directories, process trees.

Standard library only; imports nothing of tf_ring above it.
"""
