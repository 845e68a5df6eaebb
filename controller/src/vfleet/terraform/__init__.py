"""Terraform from vfleet: the embedded CLI (the `terraform` console script) and the command
lines the rollout runs."""
