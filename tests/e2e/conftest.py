"""One local deployment shared by every test in this package.

`make deploy` runs once; test_deploy.py runs first (its redeploy must find nothing to change
but the upgrade it makes), then the other files in name order (each fault test in
test_deploy_faults.py leaves the deployment healthy again), and test_destroy.py last (it
removes it all). `make destroy PURGE=1` runs again after them, whatever happened.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from .deployment import make, require_root_and_nspawn


@pytest.fixture(scope="package")
def deployed() -> Iterator[subprocess.CompletedProcess[str]]:
    require_root_and_nspawn()
    make("destroy", "PURGE=1")  # a clean start, whatever an earlier run left
    first = make("deploy")
    yield first
    make("destroy", "PURGE=1")


def _rank(item: pytest.Item) -> int:
    return {"test_deploy.py": 0, "test_destroy.py": 2}.get(item.path.name, 1)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Reorder this package's tests in the slots they hold (stable: name order otherwise)."""
    here = Path(__file__).parent
    slots = [n for n, item in enumerate(items) if item.path.parent == here]
    for n, item in zip(slots, sorted((items[n] for n in slots), key=_rank), strict=True):
        items[n] = item
