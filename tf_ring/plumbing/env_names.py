"""The names tf_ring's processes pass each other: every TF_RING_* environment
variable the Python side reads or sets, and the exit codes that carry a
meaning from a rank to the launcher. Each is defined here once; everything
else imports it from here.

Who sets a variable and who reads it is said beside it. The engine (cc/)
reads its own settings at init(); the launcher's engine flags
(tf_ring/run/engine_flags.py) set them.

Standard library only, and no imports at all: warm_spares.py loads this file
by path on a rank's start, before any package import.
"""

# ---- exit codes ----

# A rank exits with this after HostsUpdatedInterrupt, its commit saved: the
# elastic driver relaunches the job at the new size (not a failure).
EXIT_HOSTS_UPDATED = 75

# ---- the engine's settings: the launcher's engine flags set them, cc/ reads them ----

FUSION_THRESHOLD = "TF_RING_FUSION_THRESHOLD"  # bytes
CYCLE_TIME = "TF_RING_CYCLE_TIME"  # ms
CACHE_CAPACITY = "TF_RING_CACHE_CAPACITY"
SHM = "TF_RING_SHM"  # "0": MPI collectives even inside one node
TIMELINE = "TF_RING_TIMELINE"  # rank 0's trace file
TIMELINE_MARK_CYCLES = "TF_RING_TIMELINE_MARK_CYCLES"
AUTOTUNE = "TF_RING_AUTOTUNE"
AUTOTUNE_LOG = "TF_RING_AUTOTUNE_LOG"
STALL_CHECK_TIME = "TF_RING_STALL_CHECK_TIME_SECONDS"
STALL_SHUTDOWN_TIME = "TF_RING_STALL_SHUTDOWN_TIME_SECONDS"
LOG_LEVEL = "TF_RING_LOG_LEVEL"  # the engine's and the Python logger's (runtime/_logging)
# "1": process sets may be added and removed after init() (runtime/process_set)
DYNAMIC_PROCESS_SETS = "TF_RING_DYNAMIC_PROCESS_SETS"

# ---- elastic jobs: the driver sets them for every rank of a world ----

# The job's secret: the control channel's proofs (plumbing/control_wire) and
# the mirror's commits (tf_ring/elastic/restart). Never on a command line.
ELASTIC_SECRET = "TF_RING_ELASTIC_SECRET"
ELASTIC_STATE_DIR = "TF_RING_ELASTIC_STATE_DIR"  # each host's /dev/shm directory of the job
ELASTIC_COMMITTED = "TF_RING_ELASTIC_COMMITTED"  # the newest commit the driver heard of
# Which world of the job this is (0, then one more each relaunch), so that a
# hosted job keeps the results of the last world only (tf_ring.hosted).
ELASTIC_WORLD = "TF_RING_ELASTIC_WORLD"
CONTROL_TO = "TF_RING_CONTROL_TO"  # the driver's control service endpoint (plumbing/endpoints)
ULFM = "TF_RING_ULFM"  # "1": --recovery in-process (mpirun --with-ft ulfm)
ELASTIC_MIN_NP = "TF_RING_ELASTIC_MIN_NP"  # --min-np, for an in-process shrink
# Read by tf_ring.elastic.run (its reset limit), set by the user or a hosted job.
ELASTIC_RESET_LIMIT = "TF_RING_ELASTIC_RESET_LIMIT"

# ---- warm spares (tfringrun --warm-spares; elastic_driver/warm_spares) ----

SPARE_DIR = "TF_RING_SPARE_DIR"  # the job's spare directory; each host uses <it>/<hostname>
WARM_SPARE = "TF_RING_WARM_SPARE"  # "1" in a rank that began as a spare
SPARE_IMPORTS = "TF_RING_SPARE_IMPORTS"  # what a spare imports ahead (comma-separated)
SPARE_IDLE_S = "TF_RING_SPARE_IDLE_S"  # a spare with no rank on its host this long leaves

# ---- heartbeats: the launcher sets them for the rank wrappers (run/beats) ----

BEAT_TO = "TF_RING_BEAT_TO"  # "addr,addr,...:port", the launcher's addresses
BEAT_SECRET = "TF_RING_BEAT_SECRET"
BEAT_TOKEN = "TF_RING_BEAT_TOKEN"

# ---- hosted jobs (Spark, Ray): tf_ring.hosted ----

HOSTED_SECRET = "TF_RING_HOSTED_SECRET"  # the job's secret, for the frames' proofs
HOSTED_FUNCTION = "TF_RING_HOSTED_FUNCTION"  # the endpoint of the driver's function service
TASK_PYTHON = "TF_RING_TASK_PYTHON"  # the Python a task service runs its ranks with

# ---- the job's sealed TCP channels (plumbing/sealed_frames, channel_beats) ----

# Seconds a sealed connection may hear nothing from its peer (not even a
# heartbeat) before it is dropped; default 30. Read by every process that
# holds a channel (the driver, tfringrun, the ranks, the rsh agent, the task
# services); each beats every third of its own value and tells its peer so.
CHANNEL_TIMEOUT = "TF_RING_CHANNEL_TIMEOUT_S"

# ---- the launcher's own ----

BUILD_INFO = "TF_RING_BUILD_INFO"  # --check-build reads this file instead (tests)
