"""tfringrun: start a tf_ring job on the bundled OpenMPI.

`main` loads on first use: each rank's wrapper runs `python -m
tf_ring.run.beats` without the launcher. The launcher's room holds the
launcher only; its elastic mode is tf_ring.elastic_driver, what it shares
with the ranks and hosted jobs tf_ring.plumbing."""


def __getattr__(name):
    if name == "main":
        from tf_ring.run.launcher import main
        return main
    raise AttributeError("module 'tf_ring.run' has no attribute %r" % name)
