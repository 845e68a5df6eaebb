"""The planner: the cluster model, workloads, and the search over TP/PP/DP/EP splits."""
