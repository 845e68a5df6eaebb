"""The rollout: environment checks, Terraform, Ansible phases, and the in-process flow."""
