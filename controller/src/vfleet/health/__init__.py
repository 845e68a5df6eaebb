"""The pre-flight health gate: each probed host's GPUs and fabric checked against what its
topology allows, and the verdict the plan honours (`vfleet preflight`, the deploy)."""
