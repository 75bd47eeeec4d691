"""torch.distributed glue for the collective stint.Checkpointer: which group
a checkpointer serves, which store carries its commit, how a DTensor maps to
a box of its global tensor, and agreement on the outcome of a load.

A box is (global_shape, offsets, extents): the part of the global tensor one
rank holds. A DTensor's box comes from its device mesh and placements
(torch.distributed.tensor._utils.compute_local_shape_and_global_offset, the
function DTensor itself and torch.distributed.checkpoint use):

  Shard(d) on mesh dim i     dim d is split over mesh dim i as torch.chunk
                             splits it (uneven sizes, maybe empty shards)
  several Shard placements   applied in mesh-dim order (2-D FSDP x TP, or
                             Shard(0) x Shard(1) on a 2 x 2 mesh)
  Replicate() on mesh dim i  every coordinate of mesh dim i holds the same
                             box; only the rank at coordinate 0 of every
                             replicated mesh dim writes it
  Partial()                  refused (InvalidArgumentError): redistribute
                             to Shard/Replicate before saving

Empty shards are not written (they cover nothing); a tensor with no elements
at all is written, empty, by the rank at coordinate 0 of every mesh dim.
"""

from __future__ import annotations

import os
from typing import Any, List, Optional, Tuple

import torch

from . import _C

try:
    import torch.distributed as _dist
except ImportError:  # pragma: no cover - torch built without distributed
    _dist = None  # type: ignore[assignment]

try:
    from torch.distributed.tensor import DTensor as _DTensor
    from torch.distributed.tensor._utils import compute_local_shape_and_global_offset as _local_box
except ImportError:  # pragma: no cover - torch without DTensor
    _DTensor = None  # type: ignore[assignment,misc]
    _local_box = None  # type: ignore[assignment]

# The key prefix stint's commit reports use inside a group's store, so they
# never meet the keys c10d itself keeps there.
STORE_PREFIX = "stint"

Box = Tuple[List[int], List[int]]  # (global_shape, offsets); extents = the local tensor's sizes


def available() -> bool:
    """True when torch.distributed is built and initialised in this process."""
    return _dist is not None and _dist.is_available() and _dist.is_initialized()


def is_dtensor(x: Any) -> bool:
    return _DTensor is not None and isinstance(x, _DTensor)


class Group:
    """The ranks one collective Checkpointer serves.

    rank/world_size are the process's rank and size in `pg`. store is the
    c10d Store the C++ commit channel talks over, a PrefixStore
    "stint/<nonce>" (the nonce drawn by the group's rank 0 when the
    checkpointer is made, so two checkpointers, or two incarnations of a job
    on a store that outlives them, never read each other's keys) over
      the default group   the default store (_get_default_store())
      a subgroup          the subgroup's own store: the PrefixStore
                          "<group name>/" over the default store that
                          new_group() made for it and torch keeps in its
                          group table; failing that, "<group name>/" over the
                          default store, built here.
    Making one is collective over the group (one broadcast).
    """

    __slots__ = ("pg", "rank", "world_size", "store")

    def __init__(self, pg: Any, rank: int, world_size: int, store: Any) -> None:
        self.pg = pg
        self.rank = rank
        self.world_size = world_size
        self.store = store

    @staticmethod
    def resolve(process_group: Any) -> Group:
        if not available():
            raise _C.FailedPreconditionError(
                "a collective stint.Checkpointer needs torch.distributed initialised "
                "(init_process_group) before it is made")
        dc = _dist.distributed_c10d
        default_pg = dc._get_default_group()
        pg = default_pg if process_group is None else process_group
        rank = _dist.get_rank(pg)
        if rank < 0:
            raise _C.InvalidArgumentError("this process (global rank %d) is not a member of the "
                                          "process group it was given" % _dist.get_rank())
        world_size = _dist.get_world_size(pg)
        base = dc._get_default_store()
        if pg is not default_pg:
            world = getattr(dc, "_world", None)
            entry = world.pg_map.get(pg) if world is not None else None
            if entry is not None and len(entry) > 1 and entry[1] is not None:
                base = entry[1]
            else:
                base = _dist.PrefixStore("%s/" % dc._get_process_group_name(pg), base)
        nonce = [os.urandom(8).hex() if rank == 0 else None]
        if world_size > 1:
            _dist.broadcast_object_list(nonce, src=_dist.get_global_rank(pg, 0), group=pg)
        return Group(pg, rank, world_size, _dist.PrefixStore("%s/%s" % (STORE_PREFIX, nonce[0]), base))


# -- DTensor <-> boxes ------------------------------------------------------------


def _placement_str(p: Any) -> str:
    return repr(p)  # Shard(dim=0), Replicate(), _StridedShard(dim=0, sf=2)


def _check_placements(dt: Any, what: str) -> None:
    for p in dt.placements:
        if p.is_partial():
            raise _C.InvalidArgumentError(
                "%s: a DTensor with a Partial placement (%s) holds no value a checkpoint can "
                "store; redistribute it to Shard/Replicate first" % (what, p))


def local_tensor(dt: Any) -> torch.Tensor:
    """The DTensor's local shard itself (not a copy): what is written, and
    what a load fills in place."""
    t = getattr(dt, "_local_tensor", None)
    return t if isinstance(t, torch.Tensor) else dt.to_local()


def dtensor_box(dt: Any, what: str) -> Optional[Box]:
    """(global_shape, offsets) of this rank's shard of `dt`, or None when this
    rank holds no part of it (not in the mesh, or an empty shard of a
    non-empty tensor)."""
    _check_placements(dt, what)
    mesh = dt.device_mesh
    coord = mesh.get_coordinate()
    if coord is None:
        return None
    global_shape = list(dt.shape)
    local_shape, offsets = _local_box(dt.shape, mesh, dt.placements)
    local = local_tensor(dt)
    if tuple(local.shape) != tuple(local_shape):
        raise _C.InvalidArgumentError(
            "%s: the DTensor's local shard has shape %s, but its placements %s on mesh %s give "
            "%s: it is not a box of the global tensor stint can store"
            % (what, list(local.shape), [_placement_str(p) for p in dt.placements],
               list(mesh.shape), list(local_shape)))
    if local.numel() == 0 and (dt.numel() != 0 or any(c != 0 for c in coord)):
        return None
    offsets = list(offsets)
    if len(offsets) != len(global_shape):  # a 0-d DTensor
        offsets = [0] * len(global_shape)
    return global_shape, offsets


def writes(dt: Any) -> bool:
    """True when this rank writes its shard of `dt`: it is at coordinate 0 of
    every mesh dim the tensor is replicated over (the lowest rank holding the
    box)."""
    coord = dt.device_mesh.get_coordinate()
    if coord is None:
        return False
    return all(c == 0 for c, p in zip(coord, dt.placements) if p.is_replicate())


def dtensor_meta(dt: Any) -> dict:
    """What the state structure records about a DTensor leaf (informational:
    a load rebuilds a plain tensor unless `into` holds a DTensor, whose own
    layout is read)."""
    mesh = dt.device_mesh
    meta = {"mesh": list(mesh.shape), "placements": [_placement_str(p) for p in dt.placements]}
    names = getattr(mesh, "mesh_dim_names", None)
    if names:
        meta["mesh_dims"] = list(names)
    return meta
