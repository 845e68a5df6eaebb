"""What an environment is and how it is checked before anything runs: the bundle, the pins,
the inventory and its variables, SSH options, known hosts, and the Ansible runner."""
