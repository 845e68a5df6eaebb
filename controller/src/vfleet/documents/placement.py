"""Where a plan's engines run: each host, the engines its GPUs serve and their ranks. The
plan's hosts (the aggregated engines, or the decode pool) and its prefill pool's hosts are
both written this way."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from vfleet.inputs.strict import StrictModel
from vfleet.inputs.values import Address, Label

MAX_PARALLEL = 1024
RankIndex = Annotated[int, Field(ge=0, lt=MAX_PARALLEL)]


class Rank(StrictModel):
    """One GPU of a host and the engine ranks it runs."""

    gpu: Annotated[int, Field(ge=0, le=1023)]
    """the GPU index on the host (e.g. 0)"""
    tp_rank: RankIndex
    """the tensor-parallel rank, from 0 (e.g. 0)"""
    pp_rank: RankIndex
    """the pipeline-parallel rank, from 0 (e.g. 0)"""
    dp_rank: RankIndex
    """the data-parallel rank, from 0 (e.g. 0)"""


class PlanHost(StrictModel):
    """One host of the plan and the engines its GPUs serve."""

    host: Label
    """the host name as in the cluster spec (e.g. gpu-node-01)"""
    address: Address | None = None
    """the host's address (e.g. 10.0.0.11)"""
    engines: Annotated[
        dict[Label, Annotated[list[Rank], Field(min_length=1, max_length=MAX_PARALLEL)]],
        Field(min_length=1, max_length=MAX_PARALLEL),
    ]
    """engine id -> the ranks on this host's GPUs (e.g. {"0": [{"gpu": 0, ...}]})"""
