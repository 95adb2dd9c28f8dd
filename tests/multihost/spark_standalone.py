"""A Spark standalone cluster whose workers run in simulated hosts (each
with its own address, hostname, /dev/shm and /tmp); the master runs on the
launcher's side of the bridge, where the test's driver also runs.

    with SimulatedHosts(2) as hosts, SparkStandalone(hosts, cores=[2, 1]) as spark:
        ... SparkSession.builder.master(spark.master_url) ...
"""
import ipaddress
import os
import shlex
import socket
import subprocess
import sys
import time

import pyspark


def spark_class():
    return os.path.join(os.path.dirname(pyspark.__file__), "bin", "spark-class")


def _free_port(address):
    with socket.socket() as probe:
        probe.bind((address, 0))
        return probe.getsockname()[1]


def _wait_for_port(address, port, timeout, what, log):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            socket.create_connection((address, port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.5)
    raise RuntimeError("%s did not listen on %s:%d within %d s; its log:\n%s"
                       % (what, address, port, timeout, _tail(log)))


def _tail(path):
    try:
        with open(path) as f:
            return f.read()[-4000:]
    except OSError:
        return "(none)"


class SparkStandalone:
    def __init__(self, hosts, cores, log_dir, worker_memory="1g"):
        self.hosts, self.cores, self.log_dir = hosts, list(cores), log_dir
        self.worker_memory = worker_memory
        self.address = str(ipaddress.ip_network(hosts.subnet)[1])  # the bridge's
        self.port = _free_port(self.address)
        self.master_url = "spark://%s:%d" % (self.address, self.port)
        self._procs = []

    def __enter__(self):
        try:
            self._start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc):
        self.close()

    def _env(self, local_ip):
        env = dict(os.environ, SPARK_LOCAL_IP=local_ip, SPARK_LOCAL_HOSTNAME=local_ip,
                   PYSPARK_PYTHON=sys.executable, SPARK_NO_DAEMONIZE="1")
        return env

    def _start(self):
        log = os.path.join(self.log_dir, "spark-master.log")
        self._procs.append(subprocess.Popen(
            [spark_class(), "org.apache.spark.deploy.master.Master", "--host", self.address,
             "--port", str(self.port), "--webui-port", str(_free_port(self.address))],
            env=self._env(self.address), stdout=open(log, "w"), stderr=subprocess.STDOUT))
        _wait_for_port(self.address, self.port, 120, "the Spark master", log)
        for host, cores in zip(self.hosts.hostnames, self.cores):
            address = self.hosts.addresses[host]
            log = os.path.join(self.log_dir, "spark-worker-%s.log" % host)
            env = self._env(address)
            # The worker's scratch space is the host's own /tmp, as on a real node.
            env["SPARK_WORKER_DIR"] = "/tmp/spark-worker"
            command = " ".join(shlex.quote(w) for w in [
                spark_class(), "org.apache.spark.deploy.worker.Worker", self.master_url,
                "--host", address, "--cores", str(cores), "--memory", self.worker_memory,
                "--webui-port", "0"])
            self._procs.append(subprocess.Popen([self.hosts.agent, host, command], env=env,
                                                stdout=open(log, "w"), stderr=subprocess.STDOUT))
        self._wait_for_workers(120)

    def _wait_for_workers(self, timeout):
        deadline = time.time() + timeout
        master_log = os.path.join(self.log_dir, "spark-master.log")
        while time.time() < deadline:
            if _tail(master_log).count("Registering worker") >= len(self.cores):
                return
            time.sleep(0.5)
        raise RuntimeError("not every Spark worker registered within %d s; master log:\n%s"
                           % (timeout, _tail(master_log)))

    def close(self):
        for proc in reversed(self._procs):
            if proc.poll() is None:
                proc.terminate()
        for proc in self._procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self._procs = []
