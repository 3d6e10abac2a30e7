"""A Ray cluster of several nodes on this machine, every server on 127.0.0.1, for the opt-in Ray tests
(`ray.cluster_utils.Cluster`: each node a raylet of its own, with the CPUs it is given).

    $BENCH_RAY/bin/python tests/e2e/ray_cluster.py NODES CPUS_PER_NODE

Prints one JSON line, {"address": ..., "nodes": [node ids]}, then holds the cluster until its stdin closes,
and shuts it down.
"""

from __future__ import annotations

import json
import os
import sys


def main() -> None:
    nodes, cpus = int(sys.argv[1]), float(sys.argv[2])
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # a cluster of this machine alone, on loopback
    from ray.cluster_utils import Cluster

    common = {"num_cpus": cpus, "node_ip_address": "127.0.0.1", "include_dashboard": False}
    cluster = Cluster(initialize_head=True, head_node_args=common)
    try:
        for _ in range(nodes - 1):
            cluster.add_node(**common)
        cluster.wait_for_nodes()
        ids = [node.node_id for node in cluster.list_all_nodes()]
        print(json.dumps({"address": cluster.address, "nodes": ids}), flush=True)
        sys.stdin.read()
    finally:
        cluster.shutdown()


if __name__ == "__main__":
    main()
