"""tfringrun's elastic driver (--min-np / --host-discovery-script): the loop
that runs one world after another (driver), its decisions (elastic_plan),
host discovery and the blacklist (discovery), the control service rank 0
talks to, and warm spares (warm_spares, spare_seeding).

The launcher (tf_ring.run) uses it; it uses tf_ring.plumbing and nothing
of the launcher or the ranks' side. Standard library only, no TensorFlow.
"""
