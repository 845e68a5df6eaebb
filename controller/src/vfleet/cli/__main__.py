"""`python -m vfleet.cli`, the same as the `vfleet` console script."""

import sys

from vfleet.cli.main import main

sys.exit(main())
