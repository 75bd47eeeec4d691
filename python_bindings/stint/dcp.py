"""torch.distributed.checkpoint storage on stint: StorageWriter and StorageReader.

    import torch.distributed.checkpoint as dcp
    import stint.dcp

    dcp.save(state_dict, storage_writer=stint.dcp.StorageWriter("/nvme/ckpt/job-42"))
    dcp.async_save(state_dict, storage_writer=stint.dcp.StorageWriter("/nvme/ckpt/job-42"))
    dcp.load(state_dict, storage_reader=stint.dcp.StorageReader("/nvme/ckpt/job-42"))

Each DCP save is one stint checkpoint `<root>/step-<N>`: every rank writes
its own shards with stint's engine and checksums, rank 0 commits once every
rank reported (one atomic rename, LATEST, retention, fencing), and every
rank's save fails if one rank's fails. What DCP writes maps onto stint as:

- a tensor chunk (a whole tensor, or a DTensor/ShardedTensor shard) is the
  stint tensor named by its fully qualified name (`MetadataIndex.fqn`), the
  chunk being the box (global size, offsets) that rank saved;
- a bytes item (torch.save'd non-tensor values) is the blob of that name
  (stored as `rank-<r>/<fqn>` when rank r > 0 wrote it);
- DCP's `Metadata` is not stored: read_metadata() rebuilds it from the
  manifest (`TensorStorageMetadata` with one chunk per saved box,
  `BytesStorageMetadata` per blob), so DCP also loads checkpoints written by
  plain stint, and what DCP plans always matches what is on disk.

Loads read, for each tensor a rank needs, the one box around its ReadItems
(any layout and world size: stint reads only the chunks that overlap it and
verifies their checksums), then copy into DCP's targets. A damaged chunk
raises stint.DataLossError on the rank that read it (DCP reports it wrapped
in a CheckpointException; `stint_errors(e)` unwraps it).

Saves to one root take turns: rank 0's save holds the root's writer lock
(see stint.Checkpointer) while it writes and commits, and an overlapping
save (a second async_save, another process) waits for it within its
`timeout`. StorageReader opens the root read_only: it never waits for the
lock and never removes anything.

The step: `step=` fixes it; by default a save takes the newest committed
step + 1 and a load the newest committed step. DCP's `checkpoint_id` may be
an int step, "<root>/step-<N>" (any spelling of N) or the root itself.

With torch.distributed initialised the writer and reader use the default
group's store (or `store=`) as stint's commit channel, under a key prefix
that rank 0 draws per save and DCP's plan carries to every rank.
Planner plan caching (`DefaultSavePlanner(enable_plan_caching=True)`)
works: a rank that writes a cached plan (which carries an older save's
step and prefix) gets this save's from rank 0 through the store, under the
save's sequence number (each rank adds 1 per save to one counter key).
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import re
import time
import uuid
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.metadata import (
    BytesStorageMetadata,
    ChunkStorageMetadata,
    Metadata,
    MetadataIndex,
    StorageMeta,
    TensorProperties,
    TensorStorageMetadata,
)
from torch.distributed.checkpoint.planner import (
    LoadItemType,
    LoadPlan,
    LoadPlanner,
    ReadItem,
    SavePlan,
    SavePlanner,
    WriteItemType,
)
from torch.distributed.checkpoint.storage import StorageReader as _DcpStorageReader
from torch.distributed.checkpoint.storage import StorageWriter as _DcpStorageWriter
from torch.distributed.checkpoint.storage import WriteResult
from torch.futures import Future

from . import _C
from . import _object_root
from . import pytree
from .checkpointer import _check_step

__all__ = ["StorageWriter", "StorageReader", "stint_errors"]

PathLike = Union[str, "os.PathLike[str]"]
CheckpointId = Union[PathLike, int]

_STEP_DIR = re.compile(r"^step-(\d{1,20})$")
# Rank 0's blob holding DCP's planner_data (the flattened key -> state dict
# path mapping) as JSON, when the save planner had one.
_PLANNER_DATA_BLOB = "__stint_dcp__/planner_data.json"


def _step_dir_name(step: int) -> str:
    return "step-%08d" % step  # StepDirName in runtime/checkpoint/commit.cc


def _committed_steps(root: str) -> List[int]:
    """Steps committed under root (canonical step-N directories), oldest first."""
    if _object_root.is_object_root(root):
        return _object_root.committed_steps(root)
    try:
        names = os.listdir(root)
    except FileNotFoundError:
        return []
    steps = []
    for name in names:
        m = _STEP_DIR.match(name)
        canonical = m is not None and _step_dir_name(int(m.group(1))) == name
        if canonical and os.path.isdir(os.path.join(root, name)):
            steps.append(int(m.group(1)))
    return sorted(steps)


def _parse_checkpoint_id(checkpoint_id: Any) -> Optional[Tuple[Optional[str], Optional[int]]]:
    """(root or None, step or None) for a checkpoint_id stint understands, else None.

    An int (or a string of digits) is a step under the configured root;
    ".../step-<N>" is step N of root "..."; any other path is a root.
    """
    if isinstance(checkpoint_id, bool):
        return None
    if isinstance(checkpoint_id, int):
        return (None, checkpoint_id) if checkpoint_id >= 0 else None
    if isinstance(checkpoint_id, (str, os.PathLike)):
        text = os.fspath(checkpoint_id)
        if _object_root.is_object_root(text):
            url = text.rstrip("/")
            parent, _, last = url.rpartition("/")
            m = _STEP_DIR.match(last)
            if m and parent.startswith(_object_root.SCHEME) and \
                    len(parent) > len(_object_root.SCHEME):
                return (parent, int(m.group(1)))
            return (url, None)
        if not isinstance(text, str) or not text or "://" in text:
            return None
        if text.isdigit():
            return (None, int(text))
        path = os.path.normpath(text)
        m = _STEP_DIR.match(os.path.basename(path))
        if m:
            return (os.path.dirname(path) or ".", int(m.group(1)))
        return (path, None)
    return None


def _checkpoint_target(checkpoint_id: Any, root: str) -> Tuple[str, Optional[int]]:
    """(root, step) that reset(checkpoint_id) selects: the id's root, else `root`.
    InvalidArgumentError for an id stint does not understand."""
    parsed = _parse_checkpoint_id(checkpoint_id)
    if parsed is None:
        raise _C.InvalidArgumentError(
            "stint.dcp: checkpoint_id must be a step, '<root>/step-<N>' or a root path, "
            "got %r" % (checkpoint_id,))
    step = None if parsed[1] is None else _check_step(parsed[1])
    return parsed[0] if parsed[0] is not None else root, step


def _default_store() -> Optional[Any]:
    if dist.is_available() and dist.is_initialized():
        return dist.distributed_c10d._get_default_store()
    return None


def _channel(store: Any, nonce: str) -> Any:
    # A fresh prefix per save/load: stint's keys count saves and loads per
    # Checkpointer, and each DCP call opens a new one.
    return dist.PrefixStore("stint-dcp/%s/" % nonce, store)


def stint_errors(error: BaseException) -> List[_C.Error]:
    """The stint errors behind `error`: itself, or each rank's cause in a CheckpointException."""
    if isinstance(error, _C.Error):
        return [error]
    out: List[_C.Error] = []
    failures = getattr(error, "failures", None)
    if isinstance(failures, dict):
        for rank in sorted(failures):
            cause = failures[rank]
            cause = cause[0] if isinstance(cause, tuple) else cause
            if isinstance(cause, BaseException):
                out.extend(stint_errors(cause))
    cause = error.__cause__ or error.__context__
    if not out and cause is not None and cause is not error:
        out.extend(stint_errors(cause))
    return out


def _planner_data_json(planner: SavePlanner) -> Optional[bytes]:
    """DefaultSavePlanner's planner_data as JSON, if it has one made of str/int paths."""
    metadata = getattr(planner, "metadata", None)
    data = getattr(metadata, "planner_data", None)
    if not isinstance(data, dict) or not data:
        return None
    rows = []
    for fqn, path in data.items():
        if not isinstance(fqn, str) or not isinstance(path, (tuple, list)) or not all(
                isinstance(k, (str, int)) and not isinstance(k, bool) for k in path):
            return None
        rows.append([fqn, list(path)])
    return json.dumps(rows).encode()


def _rank_from(kwargs: Dict[str, Any]) -> int:
    rank = kwargs.get("rank")
    if rank is None:
        rank = dist.get_rank() if dist.is_available() and dist.is_initialized() else 0
    return int(rank)


class _StepTarget:
    """The root and step a StorageWriter or StorageReader aims at (one helper for both):
    `step` fixed at construction or by reset(checkpoint_id), else (None) the step this save
    or load chooses; and the store, left out when the object is pickled (the process-based
    async_save pickles the writer into its own process, which has its own default group and
    store)."""

    root: str
    _configured_step: Optional[int]
    _step: Optional[int]
    _store: Any

    def _init_target(self, root: PathLike, step: Optional[int], store: Any) -> None:
        self.root = os.fspath(root)
        self._configured_step = None if step is None else _check_step(step)
        self._step = self._configured_step
        self._store = store

    def __getstate__(self) -> Dict[str, Any]:
        state = dict(self.__dict__)
        state["_store"] = None
        return state

    def _retarget(self, checkpoint_id: Optional[CheckpointId]) -> None:
        """reset(): back to the configured step, or to `checkpoint_id`'s root and step."""
        self._step = self._configured_step
        if checkpoint_id is not None:
            self.root, self._step = _checkpoint_target(checkpoint_id, self.root)

    def _step_path(self, chosen: Optional[int]) -> str:
        """The step's directory (the fixed step, else `chosen`), or the root without one."""
        step = chosen if self._step is None else self._step
        return self.root if step is None else os.path.join(self.root, _step_dir_name(step))


class StorageWriter(_StepTarget, _DcpStorageWriter):
    """A DCP StorageWriter that saves each dcp.save as one stint checkpoint under `root`.

    root: the stint checkpoint root (shared by every rank).
    step: the step to save; default: the newest committed step + 1, per save.
    keep_last, keep_every, job_id, fencing_token, fencing, chunk_size, compress,
    zstd_level, io_engine, direct_io, threads: stint.Checkpointer options
    (retention and fencing are applied by rank 0 at commit; under stint-agent
    every rank's worker token is checked by default, see
    stint.Checkpointer's fencing=).
    commit_timeout: seconds rank 0 waits for every rank's report (0: stint's
    default, derived from the persist time, at least 60 s).
    timeout: seconds write_data waits for the save to be durable, including
    the wait for another writer of `root` (an overlapping async_save to the
    same root, another process) to finish: saves to one root take turns.
    store: the commit channel; default: the default group's store.
    overwrite: as FileSystemWriter's. False: a save whose target already
    holds a checkpoint raises RuntimeError("Checkpoint already exists ...")
    before anything is written; the target is the step when one is chosen
    (step=, or a checkpoint_id naming it), else the root (any committed
    step). True (the default): a save to a root is its next step, which
    loads instead of the older ones (kept as keep_last says); a committed
    step itself is never rewritten in place (stint raises AlreadyExistsError).

    root may be an object store, "s3://bucket/prefix" (endpoint and
    credentials the AWS way, as stint.Checkpointer's replica_root): each save
    is written to a local staging root (local_dir=; default: a directory
    keyed by the URL under $STINT_LOCAL_ROOT, else under the system's
    temporary directory; every rank must see the same one) with the store as
    its replica_root, and write_data returns only once the step is committed
    in the store (its manifest uploaded last), so dcp.save returning means
    the checkpoint is in the store. keep_last then applies in the store; the
    staging root keeps local_keep_last steps (default 1). An upload a killed
    process left unfinished is resumed by the next save through the same
    staging root (stint.Checkpointer's replica_root).

    After a save, `last_step` is the step it committed.
    """

    def __init__(self, root: PathLike, *, step: Optional[int] = None, keep_last: int = 3,
                 commit_timeout: float = 0.0, timeout: float = 600.0, store: Any = None,
                 overwrite: bool = True, local_dir: Optional[PathLike] = None,
                 local_keep_last: int = 1, **checkpointer_options: Any) -> None:
        super().__init__()
        self._init_target(root, step, store)
        self.overwrite = bool(overwrite)
        self._local_dir = None if local_dir is None else os.fspath(local_dir)
        self._local_keep_last = int(local_keep_last)
        self._options = dict(checkpointer_options, keep_last=keep_last,
                             commit_timeout=commit_timeout)
        self._timeout = float(timeout)
        self._rank = 0
        self._is_coordinator = True
        self._save_id = uuid.uuid4().hex
        self._local_step = 0  # this rank's choice, for plans the planner cached
        self._agreed: Dict[str, Any] = {}  # the coordinator's agreed plan data
        self.last_step: Optional[int] = None

    @property
    def checkpoint_id(self) -> str:
        return self._step_path(self.last_step)

    def reset(self, checkpoint_id: Optional[CheckpointId] = None) -> None:
        self._save_id = uuid.uuid4().hex
        self._retarget(checkpoint_id)

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id: CheckpointId) -> bool:
        parsed = _parse_checkpoint_id(checkpoint_id)
        return parsed is not None and parsed[1] is not None

    def storage_meta(self) -> Optional[StorageMeta]:
        return StorageMeta(checkpoint_id=self.checkpoint_id, save_id=self._save_id)

    def set_up_storage_writer(self, is_coordinator: bool, *args: Any, **kwargs: Any) -> None:
        self._rank = _rank_from(kwargs)
        self._is_coordinator = is_coordinator
        if not kwargs.get("use_collectives", True) and dist.is_available() and \
                dist.is_initialized() and dist.get_world_size() > 1:
            raise _C.UnimplementedError(
                "stint.dcp.StorageWriter needs use_collectives=True: the ranks agree on the "
                "step and commit channel through DCP's plan")

    def _staging_root(self) -> Optional[str]:
        """The local root saves to an object store go through; None for a path root."""
        if not _object_root.is_object_root(self.root):
            return None
        return _object_root.staging_dir(self.root, self._local_dir)

    def prepare_local_plan(self, plan: SavePlan) -> SavePlan:
        committed = _committed_steps(self.root)
        target_exists = self._step in committed if self._step is not None else bool(committed)
        staging = self._staging_root()
        if staging is not None:
            # A step staged but never uploaded (a failed upload) is taken too.
            committed = sorted(set(committed) | set(_committed_steps(staging)))
        if target_exists and not self.overwrite:
            # FileSystemWriter's error, naming where.
            where = self.root if self._step is None else \
                os.path.join(self.root, _step_dir_name(self._step))
            raise RuntimeError("Checkpoint already exists and self.overwrite=False: %s" % where)
        if self._step is not None:
            step = self._step
        else:
            step = committed[-1] + 1 if committed else 0
        self._local_step = step
        return dataclasses.replace(plan, storage_data={"stint_step": step})

    def prepare_global_plan(self, plans: List[SavePlan]) -> List[SavePlan]:
        # With plan caching, unchanged ranks' plans come back empty, without
        # the step they chose: the coordinator's own choice stands for them.
        steps = [p.storage_data["stint_step"] for p in plans
                 if isinstance(p.storage_data, dict) and "stint_step" in p.storage_data]
        self._agreed = {"stint_step": max(steps + [self._local_step]),
                        "stint_world_size": len(plans), "stint_nonce": uuid.uuid4().hex}
        return [dataclasses.replace(p, storage_data=dict(self._agreed)) for p in plans]

    def _this_save(self, data: Dict[str, Any], store: Any) -> Dict[str, Any]:
        """This save's agreed step, world size and nonce, for a final plan whose data is
        `data`: its own, or for a plan the planner cached (written before), the
        coordinator's through the store."""
        cached = data.get("stint_written", False)
        data["stint_written"] = True  # the planner hands this same plan object back
        world_size = data["stint_world_size"]
        if world_size == 1 or store is None:
            return self._agreed if cached else data
        key = "stint-dcp/writes-of-%d/" % world_size
        # Every rank reaches write_data once per save (DCP fails planning on all
        # ranks or none), after the previous save finished on all of them.
        seq = (store.add(key + "count", 1) - 1) // world_size
        if self._is_coordinator:
            store.set(key + str(seq), json.dumps(self._agreed))
            if seq > 0:
                store.delete_key(key + str(seq - 1))  # every rank read it last save
            return self._agreed if cached else data
        return json.loads(store.get(key + str(seq)).decode()) if cached else data

    def write_data(self, plan: SavePlan, planner: SavePlanner) -> Future:
        if not isinstance(plan.storage_data, dict) or "stint_nonce" not in plan.storage_data:
            raise _C.InvalidArgumentError(
                "stint.dcp.StorageWriter: the final plan was not prepared by a stint writer")
        store = self._store if self._store is not None else _default_store()
        data = self._this_save(plan.storage_data, store)
        step, world_size = data["stint_step"], data["stint_world_size"]

        names: List[str] = []
        tensors: List[torch.Tensor] = []
        boxes: List[Optional[Tuple[Tuple[int, ...], Tuple[int, ...]]]] = []
        blobs: Dict[str, bytes] = {}
        results: List[WriteResult] = []
        for item in plan.items:
            fqn = item.index.fqn
            if item.type == WriteItemType.BYTE_IO:
                value = planner.resolve_data(item)
                raw = value.getvalue() if isinstance(value, io.BytesIO) else bytes(value)
                if fqn in blobs:
                    raise _C.InvalidArgumentError("stint.dcp: bytes item '%s' twice" % fqn)
                blobs[fqn] = raw
                results.append(WriteResult(index=item.index, size_in_bytes=len(raw),
                                           storage_data={"blob": fqn}))
                continue
            # Any number of chunks of one tensor per rank: each is a box of it.
            tensor = planner.resolve_data(item).detach()
            td = item.tensor_data
            size = tuple(int(d) for d in td.size)
            offsets = tuple(int(o) for o in td.chunk.offsets)
            extents = tuple(int(e) for e in td.chunk.sizes)
            if tuple(tensor.shape) != extents:
                raise _C.InvalidArgumentError(
                    "stint.dcp: '%s' resolved to shape %s for a chunk of %s" %
                    (fqn, tuple(tensor.shape), extents))
            whole = extents == size and not any(offsets)
            names.append(fqn)
            tensors.append(tensor)
            boxes.append(None if whole else (size, offsets))
            results.append(WriteResult(
                index=item.index, size_in_bytes=tensor.numel() * tensor.element_size(),
                storage_data={"tensor": fqn, "offsets": offsets, "extents": extents}))

        if self._is_coordinator:
            planner_data = _planner_data_json(planner)
            if planner_data is not None:
                blobs[_PLANNER_DATA_BLOB] = planner_data

        if world_size > 1 and store is None:
            raise _C.FailedPreconditionError(
                "stint.dcp: a save over %d ranks needs torch.distributed initialised (or "
                "store=)" % world_size)
        kwargs = dict(self._options)
        if world_size > 1:
            kwargs.update(rank=self._rank, world_size=world_size,
                          store=_channel(store, data["stint_nonce"]))
        # One writer per root: a save that overlaps another one to this root
        # (two async_saves, another process) waits for it to close, within
        # the same timeout as the save itself.
        deadline = time.monotonic() + self._timeout
        root = self.root
        staging = self._staging_root()
        if staging is not None:
            # Into the store through a local root: rank 0 uploads after the commit.
            root = staging
            kwargs.update(replica_root=self.root, replica_keep_last=kwargs["keep_last"],
                          keep_last=self._local_keep_last)
        ckpt = _C.Checkpointer(root, lock_wait=self._timeout, **kwargs)
        try:
            handle = ckpt.save(step, names, tensors, blobs, boxes)
            handle.durable.result(max(0.0, deadline - time.monotonic()))
            # Node-local roots: this node's part is on its peers before the
            # Checkpointer (and its file service) goes away. An object store:
            # rank 0's upload of this step is committed there (its error
            # raised here, failing the save on every rank).
            ckpt.flush_replication(max(0.0, deadline - time.monotonic()))
            if staging is not None and self._rank == 0 and step not in ckpt.list_replicated():
                raise _C.UnavailableError(
                    "stint.dcp: step %d was saved to %s but is not committed in %s" %
                    (step, staging, self.root))
        finally:
            ckpt.close()
        self.last_step = step
        fut: Future = Future()
        fut.set_result(results)
        return fut

    def finish(self, metadata: Metadata, results: List[List[WriteResult]]) -> None:
        # Nothing left: the commit across ranks happened when every rank's
        # write_data saw its save durable, and read_metadata() rebuilds the
        # Metadata from the manifest.
        pass


class StorageReader(_StepTarget, _DcpStorageReader):
    """A DCP StorageReader that loads one stint checkpoint under `root`.

    step: the step to load; default: the newest committed step (all ranks
    must see the same; a load that finds them differ raises).
    verify_all: verify every chunk's checksum before reading (default: only
    the chunks read are verified, as they are read).
    commit_timeout: seconds a rank waits for the others to report their read.
    store: the channel the ranks report over; default: the default group's store.

    root may be an object store, "s3://bucket/prefix" (endpoint and
    credentials the AWS way): every rank loads straight from it (ranged
    reads of the chunks it needs, each verified), at any world size, with
    no local copy. DCP fails the load on every rank when one rank's fails.
    """

    def __init__(self, root: PathLike, *, step: Optional[int] = None, verify_all: bool = False,
                 commit_timeout: float = 0.0, store: Any = None,
                 **checkpointer_options: Any) -> None:
        super().__init__()
        self._init_target(root, step, store)
        self._verify_all = verify_all
        self._options = dict(checkpointer_options, commit_timeout=commit_timeout)
        self._rank = 0
        self._load_id = uuid.uuid4().hex
        self._loaded_step: Optional[int] = None  # the step read_metadata() chose
        self._blobs: Dict[str, str] = {}  # fqn -> stored blob name
        self._dtypes: Dict[str, torch.dtype] = {}

    @property
    def checkpoint_id(self) -> str:
        return self._step_path(self._loaded_step)

    def reset(self, checkpoint_id: Optional[CheckpointId] = None) -> None:
        self._load_id = uuid.uuid4().hex
        self._loaded_step = None
        self._retarget(checkpoint_id)

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id: CheckpointId) -> bool:
        parsed = _parse_checkpoint_id(checkpoint_id)
        if parsed is None or parsed[0] is None:
            return False
        root, step = parsed
        if step is None:
            return bool(_committed_steps(root))
        if _object_root.is_object_root(root):
            return step in _committed_steps(root)
        return os.path.isfile(os.path.join(root, _step_dir_name(step), "MANIFEST.json"))

    def _choose_step(self) -> int:
        if self._step is not None:
            return self._step
        committed = _committed_steps(self.root)
        if not committed:
            raise _C.NotFoundError("%s: no committed checkpoint to load" % self.root)
        return committed[-1]

    def read_metadata(self, *args: Any, **kwargs: Any) -> Metadata:
        world_size = dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1
        store = self._store if self._store is not None else _default_store()
        if _object_root.is_object_root(self.root):
            # Every rank reads the manifest from the store itself.
            ckpt = _C.Checkpointer(self.root, read_only=True, **self._options)
            try:
                step = self._step
                if step is None:
                    committed = ckpt.list_committed()
                    if not committed:
                        raise _C.NotFoundError("%s: no committed checkpoint to load" % self.root)
                    step = committed[-1]
                return self._metadata(step, ckpt.open_reader(step))
            finally:
                ckpt.close()
        if world_size == 1 or store is None:
            step = self._choose_step()
            return self._metadata(step, _C.CheckpointReader.open(
                os.path.join(self.root, _step_dir_name(step))))
        # Every rank reads the metadata (DCP's local step): through a
        # collective read-only Checkpointer, so that on node-local roots a
        # node that lacks the step (a replacement for a lost one) or some of
        # its files reads them from the job's other nodes.
        ckpt = _C.Checkpointer(self.root, read_only=True, rank=dist.get_rank(),
                               world_size=world_size, store=_channel(store, "metadata"),
                               **self._options)
        try:
            if self._step is not None:
                step = self._step
            else:
                committed = ckpt.list_committed()
                if not committed:
                    raise _C.NotFoundError("%s: no committed checkpoint to load" % self.root)
                step = committed[-1]
            metadata = self._metadata(step, ckpt.open_reader(step))
        finally:
            # The others may still be reading from this rank's file service.
            dist.barrier()
            ckpt.close()
        return metadata

    def _metadata(self, step: int, reader: Any) -> Metadata:
        directory = os.path.join(self.root, _step_dir_name(step))
        state: Dict[str, Any] = {}
        dtypes: Dict[str, torch.dtype] = {}
        for info in reader.tensors():
            dtype = getattr(torch, info["dtype"])
            dtypes[info["name"]] = dtype
            chunks = [ChunkStorageMetadata(offsets=torch.Size(b["offsets"]),
                                           sizes=torch.Size(b["extents"]))
                      for b in info["shard_boxes"]]
            state[info["name"]] = TensorStorageMetadata(
                properties=TensorProperties(dtype=dtype), size=torch.Size(info["shape"]),
                chunks=chunks)
        blobs: Dict[str, str] = {}
        planner_data: Dict[str, Tuple[Union[str, int], ...]] = {}
        if _PLANNER_DATA_BLOB in reader.blob_names():
            planner_data = {fqn: tuple(path) for fqn, path in
                            json.loads(reader.read_blob(_PLANNER_DATA_BLOB).decode())}
        # Rank 0's own blobs first, then rank r's "rank-<r>/<fqn>" in rank order.
        def order(name: str) -> Tuple[int, str]:
            m = re.match(r"^rank-(\d+)/", name)
            return (int(m.group(1)) if m else -1, name)
        for name in sorted(reader.blob_names(), key=order):
            if name == _PLANNER_DATA_BLOB:
                continue
            m = re.match(r"^rank-\d+/(.+)$", name)
            fqn = m.group(1) if m else name
            if fqn in state:
                continue  # a tensor of the same name wins
            blobs.setdefault(fqn, name)
            state[fqn] = BytesStorageMetadata()
        self._loaded_step = step
        self._blobs = blobs
        self._dtypes = dtypes
        for fqn in state:
            # Checkpoints not written through DCP: its flattening rule.
            planner_data.setdefault(fqn, tuple(fqn.split(".")))
        return Metadata(
            state_dict_metadata=state,
            planner_data=planner_data,
            storage_data={"stint_step": step, "stint_blobs": dict(blobs)},
            storage_meta=StorageMeta(checkpoint_id=directory, load_id=self._load_id))

    def set_up_storage_reader(self, metadata: Metadata, is_coordinator: bool, *args: Any,
                              **kwargs: Any) -> None:
        self._rank = _rank_from(kwargs)
        data = metadata.storage_data
        if not isinstance(data, dict) or "stint_step" not in data:
            raise _C.InvalidArgumentError(
                "stint.dcp.StorageReader: this Metadata was not read by a stint StorageReader")
        self._loaded_step = data["stint_step"]
        self._blobs = dict(data["stint_blobs"])
        self._dtypes = {fqn: md.properties.dtype
                        for fqn, md in metadata.state_dict_metadata.items()
                        if isinstance(md, TensorStorageMetadata)}

    def prepare_local_plan(self, plan: LoadPlan) -> LoadPlan:
        return dataclasses.replace(plan, storage_data={"stint_step": self._loaded_step})

    def prepare_global_plan(self, plans: List[LoadPlan]) -> List[LoadPlan]:
        steps = sorted({p.storage_data["stint_step"] for p in plans})
        if len(steps) != 1:
            raise _C.FailedPreconditionError(
                "stint.dcp: the ranks chose different steps to load (%s): a checkpoint was "
                "committed during the load; pass step=" % steps)
        agreed = {"stint_step": steps[0], "stint_world_size": len(plans),
                  "stint_nonce": uuid.uuid4().hex}
        return [dataclasses.replace(p, storage_data=dict(agreed)) for p in plans]

    def read_data(self, plan: LoadPlan, planner: LoadPlanner) -> Future:
        # Thousands of ReadItems and boxes: no full collection of the heap
        # inside the read (see pytree.collector_paused).
        with pytree.collector_paused():
            return self._read_data(plan, planner)

    def _read_data(self, plan: LoadPlan, planner: LoadPlanner) -> Future:
        data = plan.storage_data
        step, world_size = data["stint_step"], data["stint_world_size"]
        directory = os.path.join(self.root, _step_dir_name(step))

        # Tensors: per name, the one box around every region this rank reads.
        by_name: Dict[str, List[Tuple[ReadItem, Tuple[int, ...]]]] = {}
        byte_items: List[ReadItem] = []
        for item in plan.items:
            if item.type == LoadItemType.BYTE_IO:
                byte_items.append(item)
                continue
            base = item.storage_index.offset
            base = tuple(base) if base is not None else (0,) * len(item.storage_offsets)
            start = tuple(int(b) + int(o) for b, o in zip(base, item.storage_offsets))
            by_name.setdefault(item.storage_index.fqn, []).append((item, start))

        targets: List[Tuple[str, torch.Tensor, Tuple[int, ...], Tuple[int, ...],
                            List[Tuple[ReadItem, Tuple[int, ...]]], Optional[torch.Tensor]]] = []
        for fqn, items in by_name.items():
            ndim = len(items[0][1])
            lo = tuple(min(s[d] for _, s in items) for d in range(ndim))
            hi = tuple(max(s[d] + int(it.lengths[d]) for it, s in items) for d in range(ndim))
            extents = tuple(h - l for l, h in zip(lo, hi))
            dtype = self._dtypes[fqn]
            direct = None
            if len(items) == 1:
                # Straight into DCP's tensor when it is a plain CPU box of the stored dtype.
                dest = planner.resolve_tensor(items[0][0]).detach()
                if dest.device.type == "cpu" and dest.dtype == dtype and dest.is_contiguous() \
                        and tuple(dest.shape) == extents:
                    direct = dest
            buf = direct if direct is not None else torch.empty(extents, dtype=dtype)
            targets.append((fqn, buf, lo, extents, items, direct))

        global_shapes: Dict[str, Tuple[int, ...]] = {}

        def stint_planner(reader: Any) -> Tuple[List[Any], List[str]]:
            for info in reader.tensors():
                global_shapes[info["name"]] = tuple(info["shape"])
            in_place = []
            for fqn, buf, lo, _, _, _ in targets:
                if fqn not in global_shapes:
                    raise _C.NotFoundError("%s: no tensor '%s'" % (reader.dir, fqn))
                in_place.append((fqn, buf, global_shapes[fqn], lo))
            return in_place, []

        store = self._store if self._store is not None else _default_store()
        if world_size > 1 and store is None:
            raise _C.FailedPreconditionError(
                "stint.dcp: a load over %d ranks needs torch.distributed initialised (or "
                "store=)" % world_size)
        # read_only: opening must not clean the root, where an async_save may be writing.
        kwargs = dict(self._options, read_only=True)
        in_store = _object_root.is_object_root(self.root)
        if world_size > 1 and not in_store:
            kwargs.update(rank=self._rank, world_size=world_size,
                          store=_channel(store, data["stint_nonce"]))
        blobs: Dict[str, bytes] = {}
        ckpt = _C.Checkpointer(self.root, **kwargs)
        try:
            # Every rank loads once (the load is collective: a rank's failure
            # fails all; from a store each rank loads on its own, and DCP
            # fails the load on every rank when one raises).
            ckpt.load(stint_planner, step=step, verify_all=self._verify_all)
            if in_store and byte_items:
                reader = ckpt.open_reader(step)
                for name in {self._blobs[i.storage_index.fqn] for i in byte_items
                             if i.storage_index.fqn in self._blobs}:
                    blobs[name] = reader.read_blob(name)
        finally:
            ckpt.close()

        for fqn, buf, lo, _, items, direct in targets:
            for item, start in items:
                if direct is not None:
                    planner.commit_tensor(item, direct)
                    continue
                part = buf
                for d, (s, n) in enumerate(zip(start, item.lengths)):
                    part = part.narrow(d, s - lo[d], int(n))
                dest = planner.resolve_tensor(item).detach()
                if tuple(dest.shape) != tuple(part.shape):
                    raise _C.InvalidArgumentError(
                        "stint.dcp: '%s': DCP's target has shape %s for a read of %s" %
                        (fqn, tuple(dest.shape), tuple(part.shape)))
                dest.copy_(part)
                planner.commit_tensor(item, dest)

        if byte_items:
            reader = None if in_store else _C.CheckpointReader.open(directory)
            for item in byte_items:
                fqn = item.storage_index.fqn
                if fqn not in self._blobs:
                    raise _C.NotFoundError("%s: no blob for '%s'" % (directory, fqn))
                name = self._blobs[fqn]
                value = io.BytesIO(blobs[name] if in_store else reader.read_blob(name))
                planner.load_bytes(item, value)

        fut: Future = Future()
        fut.set_result(None)
        return fut
