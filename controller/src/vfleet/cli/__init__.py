"""The `vfleet` command line, a thin layer over the packages."""

from vfleet.cli.main import main

__all__ = ["main"]
