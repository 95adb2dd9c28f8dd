"""The barrier tasks' allGather table, grouped by real host: one rank slot
per task, ranks on one host started through its first task's service.
Executors that report one address share a machine, so their ranks share
memory; two hosts on one address would hang Open MPI (it would connect
them as one node)."""
import json


def entry(index, host, service_targets):
    """What a task contributes to the allGather."""
    return json.dumps({"index": index, "host": host, "service": service_targets})


def parse(gathered):
    """The allGather's strings as dicts, in partition order."""
    table = sorted((json.loads(item) for item in gathered), key=lambda e: e["index"])
    if [e["index"] for e in table] != list(range(len(table))):
        raise ValueError("the barrier tasks' table is incomplete: %r" % [e["index"] for e in table])
    return table


def group_by_host(table):
    """[(service targets of the host's first task, slots, host)], hosts in the
    order of their first task."""
    hosts = {}
    for item in table:
        first = hosts.setdefault(item["host"], [item["service"], 0])
        first[1] += 1
    return [(service, slots, host) for host, (service, slots) in hosts.items()]
