"""The bundled model catalog and the lookup behind `--model`."""

from __future__ import annotations

import difflib
import json
from functools import cache
from pathlib import Path
from typing import Any

from vfleet.catalog.model_shape import ModelShape, load_config_file, spec_from_config
from vfleet.data import DATA_DIR
from vfleet.errors import UserError

MODELS_DIR = DATA_DIR / "models"


def _file_for(model_id: str) -> Path:
    return MODELS_DIR / (model_id.replace("/", "--") + ".json")


@cache
def catalog_ids() -> tuple[str, ...]:
    ids = []
    for path in sorted(MODELS_DIR.glob("*.json")):
        ids.append(path.stem.replace("--", "/", 1))
    return tuple(ids)


def catalog_entry(model_id: str) -> dict[str, Any]:
    path = _file_for(model_id)
    if not path.is_file():
        # Hugging Face ids are case-insensitive in practice; accept any casing.
        lowered = {m.lower(): m for m in catalog_ids()}
        if model_id.lower() not in lowered:
            raise KeyError(model_id)
        path = _file_for(lowered[model_id.lower()])
    entry: dict[str, Any] = json.loads(path.read_text())
    return entry


def load_model(model: str) -> ModelShape:
    """`--model` is a catalog id (org/name), a model folder, or a config.json path."""
    path = Path(model).expanduser()
    if path.exists():
        return spec_from_config(load_config_file(path), name=str(path))
    try:
        entry = catalog_entry(model)
    except KeyError:
        close = difflib.get_close_matches(model, catalog_ids(), n=3, cutoff=0.4)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise UserError(
            f"unknown model {model!r}{hint}: pass a catalog id from `vfleet models`, "
            "a model folder or a config.json path"
        ) from None
    return spec_from_config(entry["config"], name=entry["id"])
