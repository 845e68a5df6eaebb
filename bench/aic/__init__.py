"""bench/plan_vs_aiconfigurator.py's parts, by job. They run under AIConfigurator's own venv,
which has no vfleet: vfleet is reached through the controller's .venv (vfleet_side)."""
