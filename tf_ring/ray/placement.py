"""RayExecutor's placement, without Ray: the placement group's bundles for
the worker counts asked for, and the hosts (with their rank slots) that the
bundles landed on."""

PACK, STRICT_SPREAD = "PACK", "STRICT_SPREAD"


def bundles(num_workers, num_hosts, num_workers_per_host, cpus_per_worker, gpus_per_worker):
    """(bundles, strategy, workers per bundle). num_workers: one bundle per
    worker, packed onto as few nodes as fit them; num_hosts: one bundle per
    host holding its num_workers_per_host workers, every bundle on its own
    node."""
    per_bundle = 1 if num_workers else num_workers_per_host
    resources = {"CPU": cpus_per_worker * per_bundle, "GPU": (gpus_per_worker or 0) * per_bundle}
    bundle = {k: v for k, v in resources.items() if v}
    if not bundle:
        raise ValueError("a worker must ask for some CPUs or GPUs (cpus_per_worker=%r, "
                         "gpus_per_worker=%r)" % (cpus_per_worker, gpus_per_worker))
    if num_workers:
        return [dict(bundle) for _ in range(num_workers)], PACK, per_bundle
    return [dict(bundle) for _ in range(num_hosts)], STRICT_SPREAD, per_bundle


class Host:
    """One real machine of the job: its address (as Ray knows the node), the
    placement group bundles on it, in order, and its rank slots."""

    def __init__(self, address):
        self.address, self.bundles, self.slots = address, [], 0

    def __repr__(self):
        return "Host(%r, bundles=%r, slots=%d)" % (self.address, self.bundles, self.slots)


def group_hosts(bundle_nodes, node_addresses, workers_per_bundle):
    """The hosts of a placement group in the order of their first bundle
    (rank 0 is on bundle 0's host). bundle_nodes: {bundle index: Ray node
    id}; node_addresses: {node id: the node's IP}. Ray nodes that share an IP
    are one machine: Open MPI must see them as one host (two hosts on one
    address hang it), so their bundles are grouped together."""
    hosts = {}
    for index in sorted(bundle_nodes):
        node = bundle_nodes[index]
        if node not in node_addresses:
            raise RuntimeError("placement group bundle %d is on Ray node %s, which is not alive"
                               % (index, node))
        host = hosts.setdefault(node_addresses[node], Host(node_addresses[node]))
        host.bundles.append(index)
        host.slots += workers_per_bundle
    return list(hosts.values())
