"""The elastic driver's end of the control channel (tf_ring.plumbing.control_wire).

It holds what the launcher and the job's rank 0 tell each other, wherever
rank 0 runs: the host-change notices of the running world (rank 0 asks for
the new ones at each commit), the world's size after an in-process shrink,
and the newest commit the ranks have mirrored. A file on the launcher's
machine cannot carry these: on a cluster rank 0 runs on another host, with
its own /dev/shm and /tmp.

One listening TCP socket, bound to the addresses the job uses; a thread per
connection (rank 0 keeps one open); a connection that fails the handshake,
or any sealed frame's check after it, is dropped, counted and logged
(tf_ring.plumbing.authenticated_server)."""
import threading

from tf_ring.plumbing import control_wire
from tf_ring.plumbing.control_wire import ChannelError
from tf_ring.plumbing import endpoints
from tf_ring.plumbing.authenticated_server import AuthenticatedServer

# Rank 0 keeps one connection (and reopens it when it breaks); a world's
# rank 0 may connect before the last world's connection has closed.
MAX_CLIENTS = 8


class ControlService:
    def __init__(self, secret, addresses, bind_address="0.0.0.0"):
        """`addresses`: where the ranks should try to reach this machine, in
        order; `bind_address`: where to listen (one address of the job's
        network with --network-interface, else every address). Host-local
        addresses are offered only when there is nothing else."""
        self.secret, self.addresses = secret, endpoints.published(addresses)
        self._lock = threading.Lock()
        self._notices = []  # [(timestamp, result)] of the running world
        self._world_size = None
        # The survivors each shrink reported, as sets of the world's ranks: one
        # per fragment when the shrink split the world (docs/elastic.md).
        self._fragments = []
        self._committed = 0
        self._server = AuthenticatedServer(secret, control_wire.LABEL, self._serve, bind_address,
                                           control_wire.MAX_LINE, "tfringrun-control", backlog=16,
                                           max_proven=MAX_CLIENTS)

    # -- the driver's side ---------------------------------------------------
    def environment(self):
        """What the ranks need to reach this service (the secret travels apart)."""
        return {control_wire.ADDRESS_ENV: self._server.endpoint(self.addresses)}

    @property
    def refused(self):
        """Connections that failed the handshake or broke the protocol."""
        return self._server.refused

    @property
    def port(self):
        return self._server.port

    def new_world(self):
        """A new world starts: its rank 0 has heard nothing yet, and it has not shrunk."""
        with self._lock:
            self._notices, self._world_size, self._fragments = [], None, []

    def add_notice(self, timestamp, result):
        with self._lock:
            self._notices.append((float(timestamp), int(result)))

    @property
    def world_size(self):
        """The running world's size after its last in-process shrink (summed
        over the fragments of a split), or None."""
        with self._lock:
            if self._fragments:
                return sum(len(f) for f in self._fragments)
            return self._world_size

    @property
    def survivors(self):
        """The world's ranks that its shrinks kept (every fragment's), or None
        when it never shrank or the reports named no ranks."""
        with self._lock:
            return set().union(*self._fragments) if self._fragments else None

    @property
    def committed(self):
        """The newest commit number rank 0 said is mirrored (0: none yet)."""
        with self._lock:
            return self._committed

    def close(self):
        self._server.close()

    # -- the ranks' side ------------------------------------------------------

    def _serve(self, channel):
        """One proven rank 0's requests, until it closes (it ended, or reconnects)."""
        while True:
            channel.send(self._answer(channel.receive()))

    def _answer(self, request):
        op = request.get("op")
        with self._lock:
            if op == "notices":
                since = request.get("since")
                if not isinstance(since, int) or since < 0:
                    raise ChannelError("notices: 'since' must be a count")
                return {"notices": self._notices[since:], "next": len(self._notices)}
            if op == "world_size":
                size, members = _count(request, "size"), request.get("members")
                if members is not None:
                    self._add_fragment(_ranks(members, size))
                self._world_size = size
                return {}
            if op == "committed":
                self._committed = max(self._committed, _count(request, "commit"))
                return {}
        raise ChannelError("unknown request %r" % (op,))

    def _add_fragment(self, members):
        """A shrink's survivors. A later shrink of the same ranks replaces
        their earlier report; disjoint reports are the fragments of a world
        that ULFM split (each survivor suspected the others), and together
        they are who is still alive."""
        self._fragments = [f for f in self._fragments if not f & members] + [members]


def _ranks(members, size):
    if (not isinstance(members, list) or len(members) != size
            or not all(isinstance(r, int) and not isinstance(r, bool) and r >= 0 for r in members)):
        raise ChannelError("'members' must list the survivors' ranks")
    return frozenset(members)


def _count(request, name):
    value = request.get(name)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ChannelError("%r must be a count" % name)
    return value
