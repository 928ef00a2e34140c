"""The round loop's two collectives over Fabric ranks (no-ops in a one-process run)."""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from lightning.fabric import Fabric

State = dict[str, torch.Tensor]


def sum_across_ranks(fabric: Fabric, acc: State) -> State:
    """Every rank's accumulator summed (one all-reduce of the tensors flattened in key order)."""
    if fabric.world_size == 1:
        return acc
    keys = sorted(acc)
    flat = torch.cat([acc[k].reshape(-1).to(fabric.device) for k in keys])
    flat = fabric.all_reduce(flat, reduce_op="sum")
    out, offset = {}, 0
    for k in keys:
        n = acc[k].numel()
        out[k] = flat[offset:offset + n].view_as(acc[k]).to(acc[k].device)
        offset += n
    return out


def gather(fabric: Fabric, obj: Any) -> list[Any]:
    """``obj`` of every rank, in rank order."""
    if fabric.world_size == 1:
        return [obj]
    out: list[Any] = [None] * fabric.world_size
    dist.all_gather_object(out, obj)
    return out


def gather_dicts(fabric: Fabric, shard: dict) -> dict:
    """Every rank's mapping (e.g. its clients' stored states) merged into one."""
    return {k: v for part in gather(fabric, shard) for k, v in part.items()}
