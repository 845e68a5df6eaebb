"""The memory and KV-cache budget engine: weights, activations, KV layout per attention kind."""
