"""On PYTHONPATH, makes `import tensorflow` fail in this Python and every
process it starts, as on the GPU machine, which has no TensorFlow: the
engine-only jobs and the launcher that starts them must not need it."""
import sys

sys.modules["tensorflow"] = None  # the import system raises ImportError for a None entry
