"""vLLM's own KV planner, run on CPU for several releases, as a test oracle for the budget."""
