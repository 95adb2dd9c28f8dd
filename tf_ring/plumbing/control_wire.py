"""The wire of the control channel between tfringrun's elastic driver and
the job's rank 0, which may run on any host (docs/elastic.md).

TCP, sealed frames of JSON objects (tf_ring.plumbing): a connection starts
with a mutual proof of the per-job secret (TF_RING_ELASTIC_SECRET, forwarded
by mpirun in the environment, never on a command line) bound to this
control service's id, which the ranks find beside its addresses in
TF_RING_CONTROL_TO; every frame after it carries a sequence number and an
HMAC under per-connection keys. A process without the secret can neither
feed rank 0 notices nor read or change the launcher's view, and cannot take
over a connection a rank opened. Standard library only: the launcher
imports it without TensorFlow."""
from tf_ring.plumbing import env_names, handshake
from tf_ring.plumbing.sealed_frames import ChannelError, PeerClosed  # noqa: F401 - re-exported

ADDRESS_ENV = env_names.CONTROL_TO  # the control service's endpoint (tf_ring.plumbing.endpoints)
SECRET_ENV = env_names.ELASTIC_SECRET
LABEL = "control"
MAX_LINE = 64 * 1024  # notices and reports are short; a longer frame is refused
HANDSHAKE_TIMEOUT_S = handshake.HANDSHAKE_TIMEOUT_S


def connect(endpoint, secret, timeout):
    """A sealed channel to the control service at `endpoint` (rank 0's side)."""
    return handshake.connect(endpoint, secret, LABEL, MAX_LINE, timeout)
