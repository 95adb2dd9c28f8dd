"""A service of the job run by a party that knows the secret, in a process
of its own, so that a test can freeze it (SIGSTOP) once its clients are
connected (issue 58). The secret comes in TF_RING_HOSTED_SECRET.

    python frozen_party.py control-service
    python frozen_party.py task-service
    python frozen_party.py function-service SECONDS
        The function prints "RUNNING" on the rank, sleeps SECONDS and
        returns 42.

Each prints "ENDPOINT <its endpoint>" once it listens, then waits to be
killed."""
import os
import sys
import time

import cloudpickle

from tf_ring.elastic_driver.control_service import ControlService
from tf_ring.hosted import function_service, task_service


def slow_function(seconds):
    print("RUNNING", flush=True)
    time.sleep(seconds)
    return 42


def main(mode, args):
    secret = os.environ["TF_RING_HOSTED_SECRET"]
    if mode == "control-service":
        service = ControlService(secret, ["127.0.0.1"])
        endpoint = service.environment()["TF_RING_CONTROL_TO"]
    elif mode == "task-service":
        service = task_service.TaskService(secret, "127.0.0.1")
        endpoint = service.endpoint(["127.0.0.1"])
    else:
        payload = cloudpickle.dumps((slow_function, (float(args[0]),), {}, "cloudpickle"))
        service = function_service.FunctionService(secret, payload, 1, "127.0.0.1")
        endpoint = service.endpoint(["127.0.0.1"])
    print("ENDPOINT %s" % endpoint, flush=True)
    while True:
        time.sleep(60)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
