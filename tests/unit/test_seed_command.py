"""The warm-spare seed command goes on command lines every user of the
launcher's host and the added host can read (`ps`): it carries only the
variables the spare's imports need, named one by one."""
import shlex

from tf_ring.elastic_driver import spare_seeding
from tf_ring.plumbing import env_names


def test_only_the_listed_variables_reach_the_seed_command_line():
    env = {env_names.SPARE_DIR: "/dev/shm/job/spares", "PATH": "/venv/bin:/usr/bin",
           "TF_CPP_MIN_LOG_LEVEL": "2", "KERAS_BACKEND": "tensorflow",
           "TF_VAR_db_password": "hunter2", "TF_VAR_secret": "s3cret-value",
           "TF_RING_ELASTIC_SECRET": "elastic-secret-9f3", "TF_RING_BEAT_SECRET": "beat-secret-4c1",
           "TF_RING_BEAT_TOKEN": "beat-token-7d2", "AWS_SECRET_ACCESS_KEY": "aws-key-5e8",
           "TF_RING_SHM": "0", "PMIX_SERVER_URI41": "pmix-uri-2b6",
           "TF_XLA_FLAGS": "--x", "OMP_PROC_BIND": "true"}
    command = spare_seeding.seed_command(env, slots=2, wait_s=20)
    # Values no path can hold by chance (the command names the Python and
    # warm_spares.py by path, and a temporary directory's name is random).
    for value in ("hunter2", "s3cret-value", "elastic-secret-9f3", "beat-secret-4c1",
                  "beat-token-7d2", "aws-key-5e8", "pmix-uri-2b6"):
        assert value not in command
    words = shlex.split(command)
    assigned = {w.split("=", 1)[0] for w in words[1:] if "=" in w and not w.startswith("/")}
    assert assigned == {"PATH", "TF_CPP_MIN_LOG_LEVEL", "KERAS_BACKEND", "OMP_PROC_BIND"}
    assert assigned <= set(spare_seeding.SEED_VARIABLES)
    assert words[-3:] == ["/dev/shm/job/spares", "2", "20"]


def test_the_allow_list_names_no_secret_and_no_prefix():
    for name in spare_seeding.SEED_VARIABLES:
        assert not name.endswith(("_", "*")) and "SECRET" not in name and "TOKEN" not in name
