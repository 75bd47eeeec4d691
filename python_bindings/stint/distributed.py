"""torch.distributed glue for the collective stint.Checkpointer: which group
a checkpointer serves, which store carries its commit, how a DTensor maps to
a box of its global tensor, which rank writes a plain tensor, and agreement
on the outcome of a load.

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

Plain tensors (prepare_save()): every rank digests its plain tensors
(XXH3-128 of their bytes) and one all_gather compares them. A tensor whose
dtype, shape and bytes are the same on every rank is replicated and written
by rank 0 alone (as torch.distributed.checkpoint does); one whose bytes
differ (an RNG state, a per-rank counter) is saved per rank, as a tensor of
shape [world_size, *shape] whose row r each rank r writes, and each rank
loads its own row back. On a load by more ranks than saved, a rank beyond the
saved world loads rank 0's row (with a warning naming the tensor). A plain
tensor only some ranks hold, or whose dtype or shape differs between ranks,
is refused on every rank (InvalidArgumentError naming it). The same gather
carries whether each rank could build its state at all: when one could not
(an unsupported leaf, a frozen= name it lacks), every rank's save() raises
and none starts the save, so the next save lines up on every rank.
"""

from __future__ import annotations

import os
import warnings
from typing import Any, Callable, Dict, List, Optional, Tuple

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


def init_from_env(backend: Optional[str] = None, timeout: Optional[float] = None) -> Dict[str, Any]:
    """Initialises torch.distributed's default group from the launcher's
    environment (stint.launch_env()): torchrun's variables, or Slurm's when
    the job runs one task per GPU under srun, with no torchrun in between
    (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID; the master is the first host
    of SLURM_JOB_NODELIST, expanded here, and the port 15000 + job id mod
    10000 unless MASTER_ADDR / MASTER_PORT are set). backend: "nccl" when
    CUDA has a device, else "gloo"; with NCCL the current device becomes
    the local rank's (of the devices the task sees). timeout: seconds for
    the rendezvous and each collective (None: torch's default). Returns the
    launch_env() dict. Nothing to do for one process, or when the group is
    initialised already."""
    env = _C.launch_env()
    if env["world_size"] == 1 or available():
        return env
    if _dist is None or not _dist.is_available():  # pragma: no cover
        raise _C.FailedPreconditionError("torch.distributed is not built into this torch")
    if not env["master_addr"] or not env["master_port"]:
        raise _C.InvalidArgumentError(
            "%s launch of %d ranks without a master address and port: set MASTER_ADDR and "
            "MASTER_PORT" % (env["launcher"], env["world_size"]))
    if backend is None:
        backend = "nccl" if torch.cuda.is_available() and torch.cuda.device_count() > 0 else "gloo"
    if backend == "nccl":
        torch.cuda.set_device(env["local_rank"] % torch.cuda.device_count())
    kwargs: Dict[str, Any] = {}
    if timeout is not None:
        import datetime
        kwargs["timeout"] = datetime.timedelta(seconds=timeout)
    _dist.init_process_group(
        backend, init_method="tcp://%s:%d" % (env["master_addr"], env["master_port"]),
        rank=env["rank"], world_size=env["world_size"], **kwargs)
    return env


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


# -- plain tensors: replicated or per rank ------------------------------------------


def _digest_inputs(tensors: List[torch.Tensor]) -> List[torch.Tensor]:
    return [t.detach().resolve_conj().resolve_neg().cpu().contiguous() for t in tensors]


def prepare_save(group: Group, step: int,
                 build: Callable[[], Tuple[Any, Optional[List[bool]]]]
                 ) -> Tuple[Any, Optional[List[bool]]]:
    """Runs `build` (-> (pytree.Flat, frozen flags or None)) on this rank and
    agrees with the other ranks, in one all_gather over the group, on whether
    every rank could build its state and which plain tensors are replicated.
    Collective: every rank calls it once per save(). Returns the Flat with
    only what this rank writes (per-rank tensors as their rows, marked in the
    structure) and the frozen flags to match. Raises on every rank when one
    rank's build failed (that rank's own exception there, AbortedError naming
    it elsewhere) or the plain tensors cannot be saved (see the module doc)."""
    failure: Optional[BaseException] = None
    flat, frozen = None, None
    payload: Dict[str, Any] = {}
    try:
        flat, frozen = build()
        plain = [(n, t) for n, t, b in zip(flat.names, flat.tensors, flat.boxes) if b is None]
        digests = _C.tensor_digests(_digest_inputs([t for _, t in plain])) \
            if group.world_size > 1 else [b""] * len(plain)
        payload["plain"] = {n: (str(t.dtype), list(t.shape), d)
                            for (n, t), d in zip(plain, digests)}
    except Exception as e:  # agreed below, then raised
        failure = e
        payload = {"error": "%s: %s" % (type(e).__name__, e)}
    gathered: List[Any] = [payload]
    if group.world_size > 1:
        gathered = [None] * group.world_size
        _dist.all_gather_object(gathered, payload, group=group.pg)
    if failure is not None:
        raise failure
    failed = [r for r, g in enumerate(gathered) if "error" in g]
    if failed:
        raise _C.AbortedError("step %d not saved: rank %d could not build its state (%s)%s" % (
            step, failed[0], gathered[failed[0]]["error"],
            "" if len(failed) == 1 else "; ranks %s failed too" % failed[1:]))
    assert flat is not None
    if group.world_size == 1:
        return flat, frozen
    return _split_plain(group, flat, frozen, [g["plain"] for g in gathered])


def _split_plain(group: Group, flat: Any, frozen: Optional[List[bool]],
                 infos: List[Dict[str, Any]]) -> Tuple[Any, Optional[List[bool]]]:
    world, rank = group.world_size, group.rank
    names, tensors, boxes, flags = [], [], [], []
    for i, (name, t, box) in enumerate(zip(flat.names, flat.tensors, flat.boxes)):
        if box is None:
            entries = [info.get(name) for info in infos]
            lacking = [r for r, e in enumerate(entries) if e is None]
            if lacking:
                raise _C.InvalidArgumentError(
                    "plain tensor '%s': ranks %s hold it, ranks %s do not; a collective save "
                    "needs every plain tensor on every rank (replicated, or one per rank)"
                    % (name, [r for r in range(world) if r not in lacking], lacking))
            if all(e == entries[0] for e in entries):
                if rank != 0:
                    continue  # replicated: rank 0 writes it
            else:
                layouts = {(e[0], tuple(e[1])) for e in entries}
                if len(layouts) > 1:
                    raise _C.InvalidArgumentError(
                        "plain tensor '%s' differs between ranks in dtype or shape (%s): it is "
                        "neither replicated nor one per rank of one layout"
                        % (name, ", ".join("rank %d: %s %s" % (r, e[0], e[1])
                                           for r, e in enumerate(entries))))
                # Per rank: row `rank` of a [world, *shape] tensor.
                flat.mark_per_rank(name, world)
                box = ([world] + list(t.shape), [rank] + [0] * t.dim())
                t = t.detach().unsqueeze(0)
        names.append(name)
        tensors.append(t)
        boxes.append(box)
        if frozen is not None:
            flags.append(frozen[i])
    flat.names, flat.tensors, flat.boxes = names, tensors, boxes
    return flat, (flags if frozen is not None else None)


def plan_per_rank(reader: Any, per_rank: Dict[str, int], rank: int, in_place: List[Any],
                  fresh: List[str], allocated: Dict[str, torch.Tensor]
                  ) -> Tuple[List[Any], List[str]]:
    """A load plan's per-rank tensors (pytree.per_rank_tensors()) read as this
    rank's row: in place into the target of `into`, or into a new tensor put
    in `allocated`. A rank beyond the saved world reads rank 0's row, with a
    warning. Returns (in_place, fresh) to give the C++ loader."""
    if not per_rank:
        return in_place, fresh
    where = reader.dir
    saved = {t["name"]: t for t in reader.tensors()}

    def box(name: str) -> Tuple[List[int], List[int]]:
        world = per_rank[name]
        t = saved.get(name)
        if t is None or not t["shape"] or t["shape"][0] != world:
            raise _C.DataLossError("%s: per-rank tensor '%s' of %d ranks is stored as %s" % (
                where, name, world, "nothing" if t is None else "shape %s" % t["shape"]))
        row = rank
        if rank >= world:
            warnings.warn("%s: per-rank tensor '%s' was saved by %d ranks; rank %d loads rank 0's"
                          % (where, name, world, rank), stacklevel=4)
            row = 0
        return list(t["shape"]), [row] + [0] * (len(t["shape"]) - 1)

    out: List[Any] = []
    for item in in_place:
        if item[0] not in per_rank:
            out.append(item)
            continue
        if len(item) != 2:
            raise _C.InvalidArgumentError(
                "%s: tensor '%s' was saved per rank (a plain tensor that differed between "
                "ranks); load it into a plain tensor, not a DTensor" % (where, item[0]))
        shape, offsets = box(item[0])
        target = item[1]
        if list(target.shape) != shape[1:]:
            raise _C.InvalidArgumentError("%s: tensor '%s' of `into` has shape %s, saved per rank "
                                          "as %s" % (where, item[0], list(target.shape), shape[1:]))
        out.append((item[0], target.detach().unsqueeze(0), shape, offsets))
    left: List[str] = []
    for name in fresh:
        if name not in per_rank:
            left.append(name)
            continue
        shape, offsets = box(name)
        dtype = getattr(torch, saved[name]["dtype"], None)
        if not isinstance(dtype, torch.dtype):
            raise _C.DataLossError("%s: tensor '%s' has dtype %r" % (where, name, saved[name]["dtype"]))
        allocated[name] = torch.empty(shape[1:], dtype=dtype)
        out.append((name, allocated[name].unsqueeze(0), shape, offsets))
    return out, left
