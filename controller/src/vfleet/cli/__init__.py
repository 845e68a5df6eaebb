"""The `vfleet` command line, a thin layer over the packages (entry point: vfleet.cli.main)."""
