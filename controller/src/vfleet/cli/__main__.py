"""`python -m vfleet.cli`: the same as the `vfleet` command."""

from vfleet.cli.main import main

raise SystemExit(main())
