"""tfringrun's elastic mode (--min-np / --max-np / --host-discovery-script):
a coordinated restart. The driver runs the job with the launcher's mpirun
invocation, polls discovery about once a second, tells rank 0 about added
slots through its control service
(tf_ring.run.control_service, reached from any host), and relaunches the job when ranks ask
for it (EXIT_HOSTS_UPDATED) or when ranks were lost (their hosts are then
blacklisted). Non-elastic runs never enter this module."""
import copy
import io
import os
import secrets
import sys
import threading
import time

from tf_ring.elastic_driver import discovery, spare_seeding
from tf_ring.elastic_driver.elastic_plan import (BelowMinimum, added_slots, hosts_argument,
                                                 plan_world)
from tf_ring.plumbing import env_names, interface_addresses
from tf_ring.plumbing.env_names import EXIT_HOSTS_UPDATED
from tf_ring.plumbing.host_updates import HostUpdateResult
from tf_ring.run.control_service import ControlService

POLL_S = 1.0


def add_arguments(parser):
    group = parser.add_argument_group("elastic training (docs/elastic.md)")
    group.add_argument("--min-np", type=int, default=None, metavar="N",
                       help="run elastically: keep going while at least N ranks can run")
    group.add_argument("--max-np", type=int, default=None, metavar="N",
                       help="never run more than N ranks (default: all discovered slots)")
    group.add_argument("--host-discovery-script", default=None, metavar="SCRIPT",
                       help="prints the usable hosts, one `host` or `host:slots` a line")
    group.add_argument("--slots-per-host", type=int, default=1, metavar="K",
                       help="slots of a host the discovery script lists without a count")
    group.add_argument("--elastic-timeout", type=float, default=600.0, metavar="S",
                       help="how long to wait for --min-np slots before failing")
    group.add_argument("--reset-limit", type=int, default=None, metavar="R",
                       help="fail after R restarts")
    group.add_argument("--blacklist-cooldown-range", type=float, nargs=2, default=None,
                       metavar=("MIN", "MAX"), help="seconds a failed host stays out")
    group.add_argument("--recovery", choices=("restart", "in-process"), default="restart",
                       help="what a lost rank costs: 'restart' relaunches every rank from the "
                            "in-memory mirror; 'in-process' keeps the survivors' processes (MPI "
                            "ULFM: mpirun --with-ft ulfm, MPI over TCP between hosts). "
                            "Default: restart")
    group.add_argument("--warm-spares", action="store_true",
                       help="keep one process a slot ready on every host, TensorFlow and "
                            "tf_ring imported, to become a rank of the next world: a restart "
                            "then skips the import (about 0.6 GB of memory a spare; "
                            "docs/elastic.md)")
    group.add_argument("--detection-timeout", type=float, default=None, metavar="S",
                       help="a host silent for S seconds (its link down, the machine frozen) "
                            "is declared lost. --recovery in-process: Open MPI's heartbeat "
                            "detector (default 10). Otherwise the launcher hears a beat from "
                            "every rank's wrapper every S/3.5 s on mpirun's output and a "
                            "signed UDP beat every 0.5 s: an elastic job restarts without a "
                            "silent host (default 120), a plain one stops naming it (off "
                            "unless given). Both cross the job's network: on a saturated "
                            "link give a minute or more (docs/launching.md)")


def is_elastic(args):
    return getattr(args, "min_np", None) is not None or getattr(args, "host_discovery_script", None)


def check_arguments(args, error):
    """`error(text)` is the parser's."""
    if not is_elastic(args):
        if getattr(args, "warm_spares", False):
            error("--warm-spares speeds up an elastic job's restarts: give --min-np or "
                  "--host-discovery-script too")
        return
    if getattr(args, "warm_spares", False) and args.recovery == "in-process":
        error("--warm-spares is for --recovery restart: in-process recovery keeps the "
              "survivors' processes, and a restart there happens only to grow")
    if args.min_np is None:
        args.min_np = args.np
    if args.min_np < 1:
        error("--min-np must be at least 1")
    if args.max_np is not None and args.max_np < args.min_np:
        error("--max-np %d is below --min-np %d" % (args.max_np, args.min_np))
    if not args.host_discovery_script and not args.host_list:
        error("elastic runs need --host-discovery-script or a fixed -H/--hostfile list")
    if args.slots_per_host < 1:
        error("--slots-per-host must be at least 1")
    if args.recovery == "restart" and args.detection_timeout is None:
        args.detection_timeout = DEFAULT_RESTART_DETECTION_TIMEOUT
    if args.recovery == "in-process":
        args.mpi_args = " ".join([args.mpi_args, *IN_PROCESS_MPI_ARGS,
                                  *detector_arguments(args.detection_timeout or
                                                      DEFAULT_DETECTION_TIMEOUT)]).strip()


# ULFM needs the first two: without --with-ft a lost rank aborts the job, and
# with the shared-memory BTL a survivor can hang on the dead rank. The third
# keeps Open MPI's `han` collectives off: a shrunk world is often uneven
# (2 ranks on one host, 1 on the other), where han's MPI_Allreduce of 64 MB
# measured 75x slower than the default `tuned` one (docs/elastic.md).
IN_PROCESS_MPI_ARGS = ("--with-ft", "ulfm", "--mca", "btl", "tcp,self",
                       "--mca", "coll_han_priority", "0")


DEFAULT_DETECTION_TIMEOUT = 10.0  # in-process mode's (Open MPI's detector)
# Restart mode's (the launcher's beats). A silent host would otherwise hang
# the job until TCP gives up (many minutes); a healthy one wrongly declared
# lost costs a restart without it. On this 2-core VM whole-machine stalls
# under load silenced every rank for up to 44 s (docs/launching.md): 120 s
# stays well above that.
DEFAULT_RESTART_DETECTION_TIMEOUT = 120.0


def detector_arguments(timeout):
    """Open MPI's heartbeat failure detector: without it a rank whose host
    goes silent (no closed socket) is never declared lost. Its period must be
    under a third of the timeout."""
    return ("--mca", "mpi_ft_detector", "true",
            "--mca", "mpi_ft_detector_timeout", "%g" % timeout,
            "--mca", "mpi_ft_detector_period", "%.3g" % (timeout / 3.5))


def shrunk_size(world):
    """The world's size after its last in-process shrink, as rank 0 told the
    driver's control service; None when it never shrank."""
    control = getattr(world, "control", None)
    return control.world_size if control is not None else None


def shrunk_survivors(world):
    """The ranks the world's in-process shrinks kept, as the survivors
    reported them; None when it never shrank."""
    control = getattr(world, "control", None)
    return control.survivors if control is not None else None


def in_process(args):
    return getattr(args, "recovery", "restart") == "in-process"


class Driver:
    def __init__(self, args, env, launch, out=None, clock=time.monotonic, sleep=time.sleep):
        """`launch(world_args, env, on_started)` runs one world and returns
        (rc, lost_hosts): lost_hosts are hosts whose ranks died outright."""
        self.args, self.env, self.launch = args, env, launch
        self.out = out or sys.stderr  # looked up now, so a test's capture sees it
        self.clock, self.sleep = clock, sleep
        self.blacklist = discovery.Blacklist(args.blacklist_cooldown_range)
        self.restarts = 0

    def discover(self):
        if self.args.host_discovery_script:
            return discovery.run_discovery(self.args.host_discovery_script, self.args.slots_per_host)
        return list(self.args.host_list)  # fixed list: hosts can only leave

    def next_world(self, survivors):
        deadline = self.clock() + self.args.elastic_timeout
        while True:
            try:
                return plan_world(self.discover(), self.blacklist, self.args.min_np,
                                  self.args.max_np, survivors)
            except BelowMinimum as e:
                if self.clock() >= deadline:
                    raise BelowMinimum("tfringrun: elastic job stopped: %s, waited %g s "
                                       "(--elastic-timeout)" % (e, self.args.elastic_timeout))
            self.sleep(POLL_S)

    def run(self):
        # The ranks of every host keep the job's state in a directory of this
        # name in their own /dev/shm, made private there by the job itself.
        job, secret = os.urandom(6).hex(), secrets.token_hex(16)
        state_dir = os.path.join("/dev/shm", "tf_ring-elastic-%s" % job)
        # With --network-interface only the job's network reaches the port.
        chosen = interface_addresses.for_listeners(getattr(self.args, "network_interface", None),
                                                   out=io.StringIO())  # the beats say it once
        self.control = ControlService(secret, chosen or interface_addresses.local_addresses(),
                                      bind_address=chosen[0] if chosen and len(chosen) == 1
                                      else "0.0.0.0")
        env = dict(self.env, **{env_names.ELASTIC_SECRET: secret,
                                env_names.ELASTIC_STATE_DIR: state_dir},
                   **self.control.environment())
        if getattr(self.args, "warm_spares", False):
            env[env_names.SPARE_DIR] = os.path.join(state_dir, "spares")
        if in_process(self.args):
            env.update({env_names.ULFM: "1", env_names.ELASTIC_MIN_NP: str(self.args.min_np)})
        try:
            return self._loop(env)
        finally:
            self.control.close()

    def _loop(self, env):
        survivors = []
        while True:
            try:
                chosen, np = self.next_world(survivors)
            except (BelowMinimum, discovery.DiscoveryError) as e:
                print(str(e) if str(e).startswith("tfringrun") else "tfringrun: %s" % e,
                      file=self.out)
                return 1
            world = copy.copy(self.args)
            world.np, world.host_list, world.hosts = np, chosen, hosts_argument(chosen)
            print("tfringrun: elastic world %d: %d ranks on %s"
                  % (self.restarts, np, world.hosts), file=self.out)
            # A new world's rank 0 hears notices from its start: the notice
            # that ended the last world must not end this one too.
            self.control.new_world()
            world.control = self.control
            # The new world must find the newest commit the last one mirrored.
            world_env = dict(env, **{env_names.ELASTIC_COMMITTED: str(self.control.committed),
                                     env_names.ELASTIC_WORLD: str(self.restarts)})
            stop = threading.Event()
            poller = threading.Thread(target=self._watch_for_gain, daemon=True,
                                      args=(chosen, stop, world_env))
            poller.start()
            try:
                rc, lost = self.launch(world, world_env)
            finally:
                stop.set()
                poller.join()
            if rc == 0 and not lost:
                return 0
            if rc == 0 and in_process(self.args):
                # Survived in-process: the ranks left finished the job.
                print("tfringrun: ranks were lost on %s; the ranks left recovered in-process "
                      "and finished" % ", ".join(sorted(lost)), file=self.out)
                return 0
            if rc == EXIT_HOSTS_UPDATED and not lost:
                reason = self._why_relaunch(np)
            elif lost:
                for host in lost:
                    self.blacklist.add(host)
                reason = "ranks were lost on %s (blacklisted)" % ", ".join(sorted(lost))
            else:
                return rc  # an ordinary failure: not a host loss, no restart
            self.restarts += 1
            if self.args.reset_limit is not None and self.restarts > self.args.reset_limit:
                print("tfringrun: elastic job stopped: %s, but --reset-limit %d restarts are "
                      "used up" % (reason, self.args.reset_limit), file=self.out)
                return rc or 1
            print("tfringrun: %s; restarting (restart %d)" % (reason, self.restarts),
                  file=self.out)
            survivors = [h for h, _ in chosen if h not in lost]

    def _why_relaunch(self, np):
        """A world whose ranks asked for a relaunch and named no lost host:
        grown, or (in-process) shrunk below --min-np by a loss whose ranks
        could not be told apart (mpirun stopped survivors before they said)."""
        shrunk = self.control.world_size if in_process(self.args) else None
        if shrunk is not None and shrunk < self.args.min_np:
            return ("ranks were lost and the %d left are fewer than --min-np %d"
                    % (shrunk, self.args.min_np))
        if shrunk is not None and shrunk < np:
            return "hosts were added (after ranks were lost: %d of %d left)" % (shrunk, np)
        return "hosts were added"

    def _watch_for_gain(self, chosen, stop, env):
        """Polls discovery while a world runs; one notice per new offer
        (with --warm-spares, once the added hosts' spares are ready)."""
        told = False
        while not stop.wait(POLL_S):
            try:
                found = self.discover()
            except discovery.DiscoveryError as e:
                print("tfringrun: %s (ignored while the job runs)" % e, file=self.out)
                continue
            world_full = self.args.max_np is not None and sum(s for _, s in chosen) >= self.args.max_np
            grown = [] if told or world_full else added_slots(chosen, found, self.blacklist)
            if grown:
                if getattr(self.args, "warm_spares", False):
                    spare_seeding.seed_hosts(self.args, env, grown, self.out)
                    if stop.is_set():
                        return  # the world ended meanwhile; the next one sees the hosts
                self.control.add_notice(time.time(), HostUpdateResult.added)
                told = True
