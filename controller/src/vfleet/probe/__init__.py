"""The probe's side of the controller: the topology probe's captured tool outputs parsed
(gpu_tools, network, host), normalised into per-host facts (normalize), and turned into the
Cluster the planner consumes (to_cluster); load.load_cluster picks facts or a YAML spec.
"""
