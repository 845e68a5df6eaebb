"""One strategy per launch mode (single, mp, ray, dp), each placing one replica's engines.

vfleet.render.engines picks the strategy per replica from its table; the pieces every
strategy shares (the replica's context, the API and expert-parallel flags) are in `base`.
"""
