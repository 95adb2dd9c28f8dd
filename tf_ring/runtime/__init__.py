"""What a rank's process holds: the native library (_library), init and
shutdown (basics), topology, process sets, logging, the timeline's switch
and the build information. The floor the collectives stand on.

Nothing is imported here: the launcher reads _build_info without TensorFlow.
"""
