"""Data files shipped with vfleet: the model and GPU catalogs, the vLLM flag registry, the
throughput fit and the measured serving cases it was fitted on."""

from pathlib import Path

DATA_DIR = Path(__file__).resolve().parent
