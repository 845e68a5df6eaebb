"""Where the planner's cluster comes from: a directory of probe facts or a hand-written
cluster YAML file. The choice lives here, not in vfleet.plan, so the plan only consumes a
Cluster and never imports the probe.
"""

from __future__ import annotations

from pathlib import Path

from vfleet.probe.to_cluster import cluster_from_facts_dir
from vfleet.topology.cluster import Cluster, load_cluster_file


def load_cluster(path: Path, allow_partial: bool = False) -> Cluster:
    """A cluster YAML file, or a directory of probe facts (artifacts/<env>/facts);
    `allow_partial` applies to facts only (see vfleet.probe.to_cluster)."""
    if path.is_dir():
        return cluster_from_facts_dir(path, allow_partial=allow_partial)
    return load_cluster_file(path)
