"""`vfleet models` and `vfleet gpus`: the bundled catalogs."""

from __future__ import annotations

import argparse


def cmd_models(_args: argparse.Namespace) -> int:
    from vfleet.catalog.models import catalog_ids

    for model_id in catalog_ids():
        print(model_id)
    return 0


def cmd_gpus(_args: argparse.Namespace) -> int:
    from vfleet.catalog.gpus import catalog

    print(f"{'name':<30} {'memory GiB':>10}  nvidia-smi names")
    for gpu in catalog():
        print(f"{gpu.name:<30} {gpu.memory_gib:10.2f}  {', '.join(gpu.aliases)}")
    return 0
