"""PowerSGD in NumPy (float64), over simulated ranks: the reference the
tests compare tf_ring's PowerSGD with. Written from the paper's algorithm
(Vogels, Karimireddy and Jaggi, NeurIPS 2019, Algorithm 1 with error
feedback), not from tf_ring's code: orthogonalization here is a QR
decomposition with its column signs made positive, which is what
Gram-Schmidt gives for a matrix of full column rank."""
import numpy as np


def as_matrix(array):
    """TensorFlow's layouts put output channels last: (prod of the rest, last)."""
    array = np.asarray(array, np.float64)
    return array.reshape(-1, array.shape[-1])


def orthonormal_columns(p):
    q, r = np.linalg.qr(p)
    return q * np.where(np.diag(r) < 0, -1.0, 1.0)


class ReferencePowerSGD:
    """State and steps of PowerSGD for `ranks` ranks.

    compressed: for each variable, its initial Q (m x rank) if its gradient is
    compressed, else None. The result of a step is, per variable, the
    average over ranks (uncompressed) or P Qᵀ (compressed).
    """

    def __init__(self, ranks, compressed, use_error_feedback=True, warm_start=True,
                 start_iter=0):
        self.ranks = ranks
        self.q = [None if q is None else np.asarray(q, np.float64) for q in compressed]
        self.use_error_feedback = use_error_feedback
        self.warm_start = warm_start
        self.start_iter = start_iter
        self.residual = [[None] * len(compressed) for _ in range(ranks)]
        self.steps = 0
        self.last_p = [None] * len(compressed)

    def step(self, grads):
        """grads[r][v]: rank r's gradient of variable v. Returns the results."""
        warm_up = self.steps < self.start_iter
        self.steps += 1
        out = []
        for v, q in enumerate(self.q):
            per_rank = [np.asarray(grads[r][v], np.float64) for r in range(self.ranks)]
            if q is None or warm_up:
                out.append(np.mean(per_rank, axis=0))
                continue
            shape = per_rank[0].shape
            ms = []
            for r in range(self.ranks):
                m = as_matrix(per_rank[r])
                if self.use_error_feedback and self.residual[r][v] is not None:
                    m = m + self.residual[r][v]
                ms.append(m)
            p = orthonormal_columns(np.mean([m @ q for m in ms], axis=0))
            new_q = np.mean([m.T @ p for m in ms], axis=0)
            approx = p @ new_q.T
            if self.use_error_feedback:
                for r in range(self.ranks):
                    self.residual[r][v] = ms[r] - approx
            if self.warm_start:
                self.q[v] = new_q
            self.last_p[v] = p
            out.append(approx.reshape(shape))
        return out
