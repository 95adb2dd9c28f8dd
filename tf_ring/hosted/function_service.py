"""The driver's service for a hosted job's ranks: each rank fetches the
pickled (function, args, kwargs) and sends back its return value or its
error. Frameworks add their own requests (a Spark task's registration)
through `handlers`."""
import threading

from tf_ring.hosted import frames, server
from tf_ring.plumbing.sealed_frames import ChannelError

PAYLOAD, RESULT = b"p", b"r"


class FunctionService:
    def __init__(self, secret, payload, num_ranks, bind_address="0.0.0.0", handlers=None):
        self.payload, self.num_ranks = payload, num_ranks
        self.results = {}  # rank -> pickled return value, of the newest world
        self.errors = {}  # rank -> the rank's traceback text, of the newest world
        self.world = 0  # an elastic job's newest world (restarts so far)
        self.world_size = None  # that world's number of ranks, once one asked
        self._handlers = dict(handlers or {})
        self._lock = threading.Lock()
        # Each rank and (Spark) each task holds one connection; a relaunched
        # world's ranks may come while the last world's still close theirs.
        self._server = server.Server(secret, frames.FUNCTION, self._serve, bind_address,
                                     name="tf_ring-function",
                                     max_proven=max(64, 3 * num_ranks + 16))

    @property
    def port(self):
        return self._server.port

    def endpoint(self, addresses):
        """What ranks and tasks are told to reach this service."""
        return self._server.endpoint(addresses)

    @property
    def refused(self):
        return self._server.refused

    def close(self):
        self._server.close()

    def _rank(self, request):
        """The request's rank; a request from a newer elastic world drops the
        last world's results and errors (that world was relaunched)."""
        rank, world = request.get("rank"), request.get("world", 0)
        size = request.get("size", self.num_ranks)
        if not (_count(rank) and _count(world) and _count(size) and rank < size <= self.num_ranks):
            raise ChannelError("no valid rank, size or world in %r" % (request,))
        with self._lock:
            if world > self.world or self.world_size is None:
                self.world, self.results, self.errors = world, {}, {}
                self.world_size = size
        return rank, world == self.world

    def _serve(self, channel):
        while True:
            request = channel.receive()
            op = request.get("op")
            if op == "fn":
                self._rank(request)  # a new world's first request resets
                channel.send_frame(PAYLOAD, self.payload)
            elif op == "result":
                rank, newest = self._rank(request)
                if request.get("ok") is True:
                    kind, value = channel.receive_frame()
                    if kind != RESULT:
                        raise ChannelError("rank %d sent no result frame" % rank)
                    with self._lock:
                        if newest:
                            self.results[rank] = value
                else:
                    with self._lock:
                        if newest:
                            self.errors[rank] = str(request.get("error"))[:65536]
                channel.send({"ok": True})
            elif op in self._handlers:
                self._handlers[op](channel, request)
            else:
                raise ChannelError("unknown request %r" % (op,))


def _count(value):
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0
