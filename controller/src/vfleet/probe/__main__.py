"""`python -m vfleet.probe`: the facts and cluster summary (vfleet.probe.cli)."""

from vfleet.probe.cli import main

raise SystemExit(main())
