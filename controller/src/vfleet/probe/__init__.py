"""Probe facts: the probe role's captured outputs read into typed host facts and a cluster."""
