"""SessionRunHook for tf.compat.v1 MonitoredTrainingSession and Estimator."""
import tensorflow as tf

from tf_ring.runtime.process_set import global_process_set
from tf_ring.collectives.variables import broadcast_variables


class BroadcastGlobalVariablesHook(tf.compat.v1.train.SessionRunHook):
    """Makes every global variable equal to root_rank's value once the session
    exists, so all ranks start training from the same weights.

    The broadcast ops are built in begin(), before the graph is finalized, and
    run in after_create_session(), after variables are initialized or restored.
    process_set: broadcast among that set's ranks (root_rank a global rank in it).
    """

    def __init__(self, root_rank=0, device="", process_set=global_process_set):
        super().__init__()
        del device  # accepted for Horovod compatibility; CPU only
        self.root_rank = root_rank
        self.process_set = process_set
        self._broadcast_op = None

    def begin(self):
        graph = tf.compat.v1.get_default_graph()
        if self._broadcast_op is None or self._broadcast_op.graph is not graph:
            self._broadcast_op = broadcast_variables(tf.compat.v1.global_variables(),
                                                     self.root_rank,
                                                     process_set=self.process_set)

    def after_create_session(self, session, coord):
        session.run(self._broadcast_op)
