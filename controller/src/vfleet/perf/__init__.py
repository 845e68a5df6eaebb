"""The throughput and latency model: fitted per-GPU costs, steady state and the batch simulator."""
