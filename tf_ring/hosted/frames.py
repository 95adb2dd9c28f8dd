"""The frames of a hosted job's channels: tf_ring.plumbing's sealed frames
(after a handshake bound to the service reached), kind b"j" holding one
JSON object, the other kinds bytes (a pickled function or result, a
daemon's output), which the elastic control channel's 64 KiB frames could
not carry. Every service of a hosted job has an endpoint
"SERVICE_ID.HOST_KEY@addr,...:port" (tf_ring.plumbing.endpoints) and a
label its clients name: the task services "task", the driver's function
service "function"."""
from tf_ring.plumbing import env_names, handshake
from tf_ring.plumbing.sealed_frames import JSON, ChannelError, PeerClosed  # noqa: F401

# The per-job secret every hosted connection proves; it travels in the
# environment (mpirun forwards it to the ranks), never on a command line.
SECRET_ENV = env_names.HOSTED_SECRET
MAX_PROVEN = 1 << 31  # a pickled result may be large once the peer is proven
TASK, FUNCTION = "task", "function"
# The largest message each service's channels carry once proven: a task
# service's are a run request and the daemon's output (64 KiB pieces) and
# its exit code. Whatever the limit, a frame is checked piece by piece
# (sealed_frames.PIECE, 1 MiB) before more of it is read.
LIMITS = {TASK: 1 << 20, FUNCTION: MAX_PROVEN}


def connect(endpoint, secret, label, timeout=10.0):
    """A sealed channel to the `label` service at `endpoint` that proved
    `secret`; ChannelError naming every address's failure else."""
    return handshake.connect(endpoint, secret, label, LIMITS[label], timeout)
