"""tfringrun's elastic mode (--min-np / --max-np / --host-discovery-script):
a coordinated restart. The driver runs the job with the launcher's mpirun
invocation, polls discovery about once a second, tells rank 0 about added
slots through its control service (control_service, reached from any host),
and relaunches the job when ranks ask for it (EXIT_HOSTS_UPDATED) or when
ranks were lost (their hosts are then blacklisted). Non-elastic runs never
enter this module."""
import io
import os
import secrets
import sys
import threading
import time

from tf_ring.elastic_driver import discovery, spare_seeding
from tf_ring.elastic_driver.elastic_plan import BelowMinimum, added_slots, plan_world
from tf_ring.plumbing import env_names, interface_addresses
from tf_ring.plumbing.env_names import EXIT_HOSTS_UPDATED
from tf_ring.plumbing.host_updates import HostUpdateResult
from tf_ring.plumbing.job_settings import WorldSettings
from tf_ring.elastic_driver.control_service import ControlService

POLL_S = 1.0


class Driver:
    def __init__(self, job, env, launch, out=None, clock=time.monotonic, sleep=time.sleep):
        """`job`: the JobSettings of an elastic job. `launch(world, env)` runs
        one world (a WorldSettings) and returns (rc, lost_hosts): lost_hosts
        are hosts whose ranks died outright."""
        self.job, self.elastic, self.env, self.launch = job, job.elastic, env, launch
        self.out = out or sys.stderr  # looked up now, so a test's capture sees it
        self.clock, self.sleep = clock, sleep
        self.blacklist = discovery.Blacklist(self.elastic.blacklist_cooldown_range)
        self.restarts = 0

    def discover(self):
        if self.elastic.discovery_script:
            return discovery.run_discovery(self.elastic.discovery_script,
                                           self.elastic.slots_per_host)
        return list(self.job.host_list)  # fixed list: hosts can only leave

    def next_world(self, survivors):
        deadline = self.clock() + self.elastic.elastic_timeout
        while True:
            try:
                return plan_world(self.discover(), self.blacklist, self.elastic.min_np,
                                  self.elastic.max_np, survivors)
            except BelowMinimum as e:
                if self.clock() >= deadline:
                    raise BelowMinimum("tfringrun: elastic job stopped: %s, waited %g s "
                                       "(--elastic-timeout)" % (e, self.elastic.elastic_timeout))
            self.sleep(POLL_S)

    def run(self):
        # The ranks of every host keep the job's state in a directory of this
        # name in their own /dev/shm, made private there by the job itself.
        job, secret = os.urandom(6).hex(), secrets.token_hex(16)
        state_dir = os.path.join("/dev/shm", "tf_ring-elastic-%s" % job)
        # With --network-interface only the job's network reaches the port.
        chosen = interface_addresses.for_listeners(self.job.network_interface,
                                                   out=io.StringIO())  # the beats say it once
        self.control = ControlService(secret, chosen or interface_addresses.local_addresses(),
                                      bind_address=chosen[0] if chosen and len(chosen) == 1
                                      else "0.0.0.0")
        env = dict(self.env, **{env_names.ELASTIC_SECRET: secret,
                                env_names.ELASTIC_STATE_DIR: state_dir},
                   **self.control.environment())
        if self.elastic.warm_spares:
            env[env_names.SPARE_DIR] = os.path.join(state_dir, "spares")
        if self.job.in_process:
            env.update({env_names.ULFM: "1", env_names.ELASTIC_MIN_NP: str(self.elastic.min_np)})
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
            world = WorldSettings(self.job, np, chosen, control=self.control)
            print("tfringrun: elastic world %d: %d ranks on %s"
                  % (self.restarts, np, world.hosts), file=self.out)
            # A new world's rank 0 hears notices from its start: the notice
            # that ended the last world must not end this one too.
            self.control.new_world()
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
            if rc == 0 and self.job.in_process:
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
            limit = self.elastic.reset_limit
            if limit is not None and self.restarts > limit:
                print("tfringrun: elastic job stopped: %s, but --reset-limit %d restarts are "
                      "used up" % (reason, limit), file=self.out)
                return rc or 1
            print("tfringrun: %s; restarting (restart %d)" % (reason, self.restarts),
                  file=self.out)
            survivors = [h for h, _ in chosen if h not in lost]

    def _why_relaunch(self, np):
        """A world whose ranks asked for a relaunch and named no lost host:
        grown, or (in-process) shrunk below --min-np by a loss whose ranks
        could not be told apart (mpirun stopped survivors before they said)."""
        shrunk = self.control.world_size if self.job.in_process else None
        if shrunk is not None and shrunk < self.elastic.min_np:
            return ("ranks were lost and the %d left are fewer than --min-np %d"
                    % (shrunk, self.elastic.min_np))
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
            max_np = self.elastic.max_np
            world_full = max_np is not None and sum(s for _, s in chosen) >= max_np
            grown = [] if told or world_full else added_slots(chosen, found, self.blacklist)
            if grown:
                if self.elastic.warm_spares:
                    spare_seeding.seed_hosts(self.job, env, grown, self.out)
                    if stop.is_set():
                        return  # the world ended meanwhile; the next one sees the hosts
                self.control.add_notice(time.time(), HostUpdateResult.added)
                told = True
