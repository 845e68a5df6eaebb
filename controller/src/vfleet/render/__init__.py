"""Plan + cluster -> launch scripts, systemd units and env files, per host and launch mode."""
