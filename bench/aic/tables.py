"""AIC's packaged tables (systems, their silicon data, bundled model configs), and the
run-time copies of a system whose inter-node link is set from a cluster file."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

from aic.scenarios import REPO, Scenario


def aic_root() -> Path:
    """AIC's packaged data: systems/*.yaml, systems/data/, model_configs/."""
    spec = importlib.util.find_spec("aiconfigurator_core")
    assert spec is not None and spec.origin is not None
    return Path(spec.origin).parent


def aic_systems() -> list[str]:
    return sorted(
        p.stem
        for p in (aic_root() / "systems").glob("*.yaml")
        if (aic_root() / "systems" / "data" / p.stem).is_dir()
    )


def aic_bundles(model: str) -> bool:
    return (aic_root() / "model_configs" / f"{model.replace('/', '--')}_config.json").is_file()


def write_link_system(folder: Path, base: str, gbps: float) -> str:
    """A copy of AIC's `base` system whose inter-node link is `gbps` GB/s; returns its name."""
    import yaml

    stock = aic_root() / "systems"
    spec = yaml.safe_load((stock / f"{base}.yaml").read_text())
    if "inter_node_bw" not in spec.get("node", {}):
        raise RuntimeError(f"AIC {base}.yaml has no node.inter_node_bw: the link cannot be set")
    name = f"{base}_inter{gbps:.3g}GBps".replace(".", "p")
    spec["node"]["inter_node_bw"] = round(gbps * 1e9)
    spec["data_dir"] = str(stock / spec["data_dir"])  # the stock silicon data, absolute
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    return name


def cluster_link(cluster: str) -> tuple[float, int]:
    """The cluster file's measured inter-node all-reduce bus bandwidth and GPUs per node."""
    import yaml

    doc = yaml.safe_load((REPO / "examples" / "clusters" / cluster).read_text())
    return float(doc["inter_node"]["busbw_GBps"]), int(doc["gpus_per_node"])


def model_is_moe(aic_model: str) -> bool:
    path = aic_root() / "model_configs" / f"{aic_model.replace('/', '--')}_config.json"
    cfg = json.loads(path.read_text())
    cfg = {**cfg, **(cfg.get("text_config") or {})}
    return any(cfg.get(k) for k in ("num_experts", "n_routed_experts", "num_local_experts"))


def link_systems(scenarios: list[Scenario], folder: Path) -> dict[str, Any]:
    """The run-time AIC systems for scenarios whose inter-node link AIC must take measured."""
    out: dict[str, Any] = {}
    for sc in scenarios:
        if not sc.measured_link:
            continue
        busbw, per_node = cluster_link(sc.cluster)
        main = write_link_system(folder, sc.aic_system, busbw)
        share = write_link_system(folder, sc.aic_system, busbw / per_node)
        out[sc.name] = {
            "path": str(folder),
            "system": main,
            "busbw": busbw,
            "share": busbw / per_node,
            "variants": [("stock", sc.aic_system), ("share", share)],
        }
    return out
