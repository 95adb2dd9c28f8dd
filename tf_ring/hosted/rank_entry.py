"""What every rank of a hosted job runs (python -m tf_ring.hosted.rank_entry):
fetch the user's function from the driver's FunctionService, run it, and
send back its return value, or the error that ended it. The job then fails
naming this rank (tf_ring.hosted.job)."""
import importlib
import os
import pickle
import sys
import traceback

from tf_ring.plumbing import env_names
from tf_ring.plumbing.env_names import ELASTIC_WORLD as WORLD_ENV
from tf_ring.hosted import frames, function_service

FUNCTION_ENV = env_names.HOSTED_FUNCTION  # the endpoint of the driver's function service


def main():
    rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", "0"))
    try:
        return _run(rank)
    except (frames.ChannelError, OSError) as e:  # the driver is gone, frozen or not the driver
        raise SystemExit("tf_ring: rank %d lost the driver's function service (%s): %s"
                         % (rank, os.environ.get(FUNCTION_ENV), e))


def _run(rank):
    """One connection fetches the function, another returns its result:
    none is open while the function runs, whose imports may hold the
    interpreter lock for seconds (TensorFlow's do) and so keep the
    channel's heartbeat thread from beating."""
    size = int(os.environ.get("OMPI_COMM_WORLD_SIZE", "1"))
    world = int(os.environ.get(WORLD_ENV, "0"))  # an elastic job's relaunch count
    channel = _connect()
    channel.send({"op": "fn", "rank": rank, "size": size, "world": world})
    kind, payload = channel.receive_frame()
    channel.close()
    if kind != function_service.PAYLOAD:
        raise SystemExit("tf_ring: rank %d got no function from the driver" % rank)
    try:  # a function whose module this host cannot import fails here, named
        fn, args, kwargs, pickler = pickle.loads(payload)
        value = fn(*args, **kwargs)
        data = importlib.import_module(pickler).dumps(value)
    except BaseException:  # noqa: B902 - a SystemExit in fn fails the rank too
        error = traceback.format_exc()
        sys.stderr.write("tf_ring: rank %d failed:\n%s" % (rank, error))
        channel = _connect()
        channel.send({"op": "result", "rank": rank, "size": size, "world": world, "ok": False,
                      "error": error})
        channel.receive()
        channel.close()
        return 1
    channel = _connect()
    channel.send({"op": "result", "rank": rank, "size": size, "world": world, "ok": True})
    channel.send_frame(function_service.RESULT, data)
    channel.receive()
    channel.close()
    return 0


def _connect():
    return frames.connect(os.environ[FUNCTION_ENV], os.environ[frames.SECRET_ENV],
                          frames.FUNCTION)


if __name__ == "__main__":
    sys.exit(main())
