"""One local deployment shared by every test in this package.

`make deploy` runs once; the files run in name order: test_deploy.py (the first deploy and
the no-change redeploy, which must come before any fault), test_deploy_faults.py (each fault
test leaves the deployment healthy again) and test_destroy.py (last, it removes it all).
`make destroy` runs again after them, whatever happened.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import pytest

from .deployment import make, require_root_and_nspawn


@pytest.fixture(scope="package")
def deployed() -> Iterator[subprocess.CompletedProcess[str]]:
    require_root_and_nspawn()
    make("destroy")  # a clean start, whatever an earlier run left
    first = make("deploy")
    yield first
    make("destroy")
