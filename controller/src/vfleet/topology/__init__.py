"""What a cluster is: its nodes, GPUs and links, as the planner, the probe and render see it."""
