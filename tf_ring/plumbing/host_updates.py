"""What a host-change notice says, as the elastic driver sends it to the
job's rank 0 over the control channel and tf_ring.elastic reads it
(Horovod's HostUpdateResult; tf_ring.elastic exports it)."""
import enum


class HostUpdateResult(enum.IntFlag):
    """What a host-change notice says; notices combine with `|`."""
    no_update = 0
    removed = 1
    added = 2
    mixed = 3
