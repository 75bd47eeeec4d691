"""stint.Checkpointer: asynchronous, crash-consistent checkpoints of nested
state dicts (model.state_dict(), optimizer.state_dict(), plain values).

    ckpt = stint.Checkpointer("/nvme/ckpt/job-42", keep_last=3)
    staged, durable = ckpt.save(step, {"model": model.state_dict(),
                                       "optim": optimizer.state_dict(), "epoch": 3})
    # save() returns once the state is copied (staged is already done): train on.
    durable.result()                      # committed on disk (GIL released while waiting)

    state = ckpt.load()                   # newest checkpoint that verifies, new tensors
    ckpt.load(into={"model": model.state_dict()}, strict=False)  # fill in place

save() copies every tensor into a bounded staging pool, then background
threads checksum, optionally compress, write with io_uring + O_DIRECT and
commit atomically. The copy is the only time training may stall, and it need
not: after attach(), snapshots are lazy.

    ckpt = stint.Checkpointer(root)       # snapshot="auto"
    ckpt.attach(model, optimizer)         # forward pre-hook + optimizer step pre-hook
    for step in ...:
        loss = model(x).sum(); loss.backward()   # copies of the last save run meanwhile
        optimizer.step()                  # the hook waited until they read the parameters
        if step % k == 0: ckpt.save(step, {"model": model.state_dict(), "optim": optimizer.state_dict()})

CUDA tensors are copied device-to-host into pinned staging on copy streams
ordered after their current stream; save() returns after issuing the copies.
CPU tensors (snapshot="lazy") are copied by copy threads while the next
forward and backward compute. A tensor must not be written before its copy
read it: parameters and optimizer state are protected up to the next
optimizer step, buffers (BatchNorm statistics) up to the next forward. The
hooks attach() installs enforce it; on a GPU the compute stream waits for
the copy (no host synchronisation), on the CPU the hook waits for the copy
threads. Without hooks, call wait_staged() before writing the state, or use
snapshot="eager", where save() returns once every copy is done.
A checkpoint that fails verification is never loaded: load() falls back to
the newest older one that verifies and reports what it skipped
(load_result().skipped); errors raise stint exceptions carrying the
runtime's message.

In a distributed job (torch.distributed initialised, or process_group=
given) the Checkpointer is collective: every rank makes it and calls save()
and load() with its own state, in the same order.

    ckpt = stint.Checkpointer("/shared/ckpt/job-42")     # on every rank
    msd, osd = get_state_dict(model, opt)                # FSDP2: DTensors inside
    ckpt.save(step, {"model": msd, "optim": osd})        # each rank writes its shards
    ckpt.load(into={"model": msd, "optim": osd})         # any mesh, any world size
    set_state_dict(model, opt, model_state_dict=msd, optim_state_dict=osd)

Each rank writes its own shards and rank 0 commits once every rank reported;
every rank's durable future gets the same outcome. DTensors are written as
their local shards, boxes of the global tensor (see stint.distributed;
a Replicate() box once, by the lowest rank holding it); a plain tensor that
is the same on every rank (compared by digest at each save) is written by
rank 0 only (as torch.distributed.checkpoint does), one that differs (a
torch.get_rng_state(), a per-rank counter) is saved per rank and each rank
loads its own back (a rank beyond the saved world gets rank 0's, with a
warning; see stint.distributed); non-tensor leaves and bytes are kept per
rank. load(into=) reads each DTensor's own box, whatever layout was saved;
load() without `into` returns full plain tensors.

One writer per root, any number of readers. A Checkpointer opened to save
(the default; in a distributed job rank 0's) holds the root's writer lock
(`<root>/.writer.lock`, flock(2), naming its pid and host) until close(),
and only it removes what a dead writer left behind (`.tmp-*`, `LATEST.tmp`).
Another writer of the same root, in this process or another, raises
FailedPreconditionError naming the holder's pid and host: close() the first
one before making another. To load from or list a root that a job is
saving into (an evaluator beside the trainer), open it read_only: that
never locks and never removes anything.

    trainer:    ckpt = stint.Checkpointer(root)                  # the writer
    evaluator:  ev = stint.Checkpointer(root, read_only=True)    # a reader
                ev.list_committed(); ev.load()

Thread-compatible: use one Checkpointer from one thread at a time.
"""

from __future__ import annotations

import json
import os
from typing import Any, Callable, Dict, Iterable, List, Literal, Optional, Tuple, Union

import torch

from . import _C
from . import distributed
from . import pytree

PathLike = Union[str, "os.PathLike[str]"]
Device = Union[str, torch.device, int]  # what torch.device() accepts
# map_location: a device, or {saved device: device} as torch.load takes it
MapLocation = Union[Device, Dict[str, Device]]


MAX_STEP = 2**64 - 1  # a step is an unsigned 64-bit number (manifest, step-N directory names)


def _check_step(step: int) -> int:
    """`step`, or InvalidArgumentError (a ValueError) naming it and the bound."""
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise _C.InvalidArgumentError("step must be a non-negative int, got %r" % (step,))
    if step > MAX_STEP:
        raise _C.InvalidArgumentError("step %d is out of range: a step is at most 2**64 - 1 = %d"
                                      % (step, MAX_STEP))
    return step


def _fencing_session(fencing: Any) -> Any:
    """What _C.Checkpointer's fencing= takes: a bool or a CoordinatorSession
    (an ElasticWorker gives its session, started if need be)."""
    from .elastic import ElasticWorker
    if isinstance(fencing, (bool, _C.CoordinatorSession)):
        return fencing
    if isinstance(fencing, ElasticWorker):
        return fencing.start().session
    raise _C.InvalidArgumentError(
        "fencing must be True, False, a stint.elastic.ElasticWorker or a "
        "stint._C.CoordinatorSession, got %r" % (fencing,))


class LoadResult:
    """What load_result() returns."""

    __slots__ = ("step", "state", "dir", "skipped", "skipped_steps")

    step: int
    state: Any
    dir: str
    skipped: List[str]
    skipped_steps: List[int]

    def __init__(self, step: int, state: Any, dir: str, skipped: List[str],
                 skipped_steps: List[int]) -> None:
        self.step = step                    # the step of the checkpoint loaded
        self.state = state                  # the rebuilt object
        self.dir = dir                      # its directory
        self.skipped = skipped              # newer checkpoints passed over: "step-...: error"
        self.skipped_steps = skipped_steps  # the damaged ones, as steps (see quarantine())

    def __repr__(self) -> str:
        return "<stint.LoadResult step %d from %s%s>" % (
            self.step, self.dir, ", skipped %s" % self.skipped_steps if self.skipped_steps else "")


class Checkpointer:
    """Checkpoints of this process's state, or collectively of a distributed
    job's, under `root` (created if missing, with its parents, like mkdir -p;
    a path every rank sees).

    Options (all keyword-only; defaults as in the C++ CheckpointOptions):
      read_only=False    True: open only to load and list (the root must
                         exist): no writer lock, nothing removed, save()
                         raises FailedPreconditionError; any number of
                         readers may open a root beside its writer. False:
                         the root's one writer (see the module docstring);
                         a second one raises FailedPreconditionError naming
                         the holder's pid and host
      lock_wait=0.0      seconds a writer waits for the root's writer lock
                         while another writer holds it, before raising that
                         error (0: not at all, except under stint-agent with
                         fencing, where a requeued segment waits up to 2 min
                         for its fenced predecessor to let go)
      keep_last=3        newest K committed checkpoints kept (0: all)
      keep_every=0       also keep steps divisible by N forever
      compress=False     zstd per chunk; zstd_level=1. "auto": each save
                         compresses a sample and uses zstd only where it
                         writes more logical bytes/s than raw (a slow or
                         shared path); stats()["last"]["compress_decision"]
      incremental=False  a save writes only the chunks whose bytes changed since
                         the newest committed checkpoint and references the
                         rest there (XXH3-128 of each chunk); see save(frozen=)
      chunk_size=8 MiB   multiple of 4096
      staging_bytes=0    staging pool size. 0: sized automatically to twice the
                         largest snapshot so far, growing when a save is larger
                         than any before (the optimizer's state appeared after
                         a save at step 0), up to staging_max_bytes; > 0: fixed,
                         a larger snapshot raises ResourceExhaustedError
      staging_max_bytes=0  cap of the automatic size (0: half the physical
                         memory); a larger snapshot raises ResourceExhaustedError
      busy_policy="block" or "skip" when the staging pool is full; block_timeout=600 s
      copy_timeout=600 s a save whose copies after save() returned (CUDA to host,
                         lazy) take longer fails with DeadlineExceededError, so
                         flush() and close() never hang on a wedged device
      io_engine="auto"   "uring" or "posix" (STINT_IO overrides); direct_io=True
      io_queue_depth=32, io_size=4 MiB, threads=0 (hardware threads - 1)
      job_id="", fencing_token=0   recorded in the manifest
      fencing=True       under stint-agent (the worker registration it puts in
                         the environment: STINT_WORKER_ID, STINT_WORKER_SECRET,
                         STINT_FENCING_TOKEN), every commit first asks stintd
                         whether this worker incarnation, and with several
                         ranks every rank's, is still current: a worker that
                         lost its lease (its node cut off while the job was
                         requeued elsewhere) gets AbortedError "fenced: ..."
                         on the durable future, and nothing committed or
                         LATEST moves. fencing_token=0 then records the
                         worker's; retention then also keeps the steps an
                         evaluation of the job is queued or running on
                         (stintd's pinned steps). A
                         stint.elastic.ElasticWorker or
                         stint._C.CoordinatorSession: check its registration
                         instead; False: never check. Without stint-agent and
                         without a session there is nothing to check.
      snapshot="auto"    "eager": save() returns once every tensor is copied;
                         "lazy": save() returns after issuing the copies
                         (see attach(), before_write(), wait_staged());
                         "auto": lazy once attach() was called, else eager
      cuda=None          copy CUDA tensors through pinned staging on copy
                         streams (None: when torch.cuda.is_available())

    Collective options:
      collective=None    None: collective when torch.distributed is
                         initialised or process_group is given; False: this
                         process alone (e.g. a rank-0-only checkpoint)
      process_group=None the group (default: the default group); the commit
                         uses its c10d store, see stint.distributed.Group
      commit_timeout=0.0 seconds a rank waits for the others' reports and
                         the commit decision (0: derived from persist time)
      node_id=""         this rank's node ("": $STINT_NODE_ID, else the host
                         name). Ranks of one node share one root; each node's
                         root may be its own disk (node-local roots): its
                         ranks write there, one of them commits there, and
                         the job still commits once. Loads read what this
                         node lacks from the job's other nodes
      peer_replicas=0    node-local roots: nodes holding each node's part of
                         a step, its own included (0: 2 when the step spans
                         several nodes; 1: no copies). Copied in the
                         background, verified, committed on the peer;
                         flush_replication() waits for them
      peer_replica_dir="" where this node keeps other nodes' parts ("":
                         <root>/.peer-replicas; a tmpfs path keeps them in
                         host memory)
      replica_root=""    tier 2: each committed step copied there in the
                         background (rank 0), verified, committed there; a
                         path (a shared file system) or "s3://bucket/prefix"
                         (an S3-compatible object store, configured the AWS
                         way: AWS_ENDPOINT_URL, AWS_REGION, AWS_ACCESS_KEY_ID /
                         AWS_SECRET_ACCESS_KEY or ~/.aws/credentials). Loads
                         fall back to it; flush_replication() waits for it
      replica_keep_last=3, replica_keep_every=0
                         tier-2 retention, as keep_last / keep_every
    A root may itself be "s3://bucket/prefix" with read_only=True: loads
    and listings straight from the object store.
    Making a collective Checkpointer is itself collective (rank 0 draws the
    store key prefix and broadcasts it).
    """

    def __init__(self, root: PathLike, *, keep_last: int = 3, keep_every: int = 0,
                 compress: Union[bool, str] = False, zstd_level: int = 1,
                 chunk_size: int = 8 << 20,
                 staging_bytes: int = 0, staging_max_bytes: int = 0, busy_policy: str = "block",
                 block_timeout: float = 600.0, copy_timeout: float = 600.0, io_engine: str = "auto", direct_io: bool = True, io_queue_depth: int = 32,
                 io_size: int = 4 << 20, threads: int = 0, job_id: str = "",
                 fencing_token: int = 0, process_group: Any = None,
                 collective: Optional[bool] = None, commit_timeout: float = 0.0,
                 snapshot: str = "auto", cuda: Optional[bool] = None,
                 incremental: bool = False, read_only: bool = False,
                 lock_wait: float = 0.0, fencing: Any = True, node_id: str = "",
                 peer_replicas: int = 0, peer_replica_dir: PathLike = "",
                 replica_root: PathLike = "", replica_keep_last: int = 3,
                 replica_keep_every: int = 0) -> None:
        if snapshot not in ("auto", "eager", "lazy"):
            raise _C.InvalidArgumentError(
                "snapshot must be 'auto', 'eager' or 'lazy', got %r" % (snapshot,))
        if cuda is None:
            cuda = torch.cuda.is_available()
        if compress not in (True, False, "auto"):
            raise _C.InvalidArgumentError(
                "compress must be True, False or 'auto', got %r" % (compress,))
        self._snapshot = snapshot
        self._hooks: List[Any] = []
        self._attached_modules: List[torch.nn.Module] = []
        if collective is None:
            collective = process_group is not None or distributed.available()
        elif not collective and process_group is not None:
            raise _C.InvalidArgumentError("process_group= was given with collective=False")
        self._group: Optional[distributed.Group] = (
            distributed.Group.resolve(process_group) if collective else None)
        rank, world_size, store = 0, 1, None
        if self._group is not None:
            rank, world_size = self._group.rank, self._group.world_size
            if world_size > 1:
                store = self._group.store
        self._rank = rank
        self._replica_root = os.fspath(replica_root)
        self._c = _C.Checkpointer(
            os.fspath(root), keep_last=keep_last, keep_every=keep_every,
            compress=compress is True, compress_auto=compress == "auto",
            zstd_level=zstd_level, chunk_size=chunk_size, staging_bytes=staging_bytes,
            staging_max_bytes=staging_max_bytes, busy_policy=busy_policy,
            block_timeout=block_timeout, copy_timeout=copy_timeout, io_engine=io_engine,
            direct_io=direct_io, io_queue_depth=io_queue_depth, io_size=io_size, threads=threads,
            job_id=job_id, fencing_token=fencing_token, rank=rank, world_size=world_size,
            store=store, commit_timeout=commit_timeout,
            snapshot="eager" if snapshot == "eager" else "lazy", cuda=bool(cuda),
            incremental=incremental, read_only=read_only, lock_wait=lock_wait,
            fencing=_fencing_session(fencing), node_id=node_id, peer_replicas=peer_replicas,
            peer_replica_dir=os.fspath(peer_replica_dir), replica_root=os.fspath(replica_root),
            replica_keep_last=replica_keep_last, replica_keep_every=replica_keep_every)

    # -- saving ---------------------------------------------------------------

    def save(self, step: int, state: Any,
             frozen: Union[None, Iterable[str], Callable[[str, torch.Tensor], bool]] = None
             ) -> _C.SaveHandle:
        """Checkpoints `state` as step `step`. Returns a SaveHandle that
        unpacks as (staged, durable) futures. Eager snapshots: `state` may be
        modified as soon as save() returns. Lazy: once staged is done, or
        through the hooks (attach()) or before_write(). AlreadyExistsError if the step is committed
        already or a save of it is still in flight. An earlier save's failure is never raised
        here: its durable future raises it, else the next flush().
        Collective: every rank calls it with the same step; durable fails on
        every rank when one rank fails or the shards do not tile a tensor.
        When one rank cannot even build its state (an unsupported leaf),
        save() raises on every rank (AbortedError naming that rank on the
        others) and the next save works on all.

        frozen (incremental=True): the tensors whose bytes are those of the
        previous save, e.g. a frozen base model under LoRA: their names
        (``"model.base.weight"``, as stint inspect lists them) or a predicate
        ``(name, tensor) -> bool``. They are referenced in the previous
        checkpoint without being copied or hashed. A promise: a flagged
        tensor that did change is saved with its old bytes. Without it every
        tensor is hashed and only changed chunks are written.
        """
        _check_step(step)
        # Thousands of nodes per save: no collection of the heap meanwhile
        # (see pytree.collector_paused).
        with pytree.collector_paused():
            return self._save(step, state, frozen)

    def _save(self, step: int, state: Any,
              frozen: Union[None, Iterable[str], Callable[[str, torch.Tensor], bool]]
              ) -> _C.SaveHandle:
        def build() -> Tuple[pytree.Flat, Optional[List[bool]]]:
            flat = pytree.flatten(state)
            return flat, _frozen_flags(frozen, flat.names, flat.tensors)

        if self._group is not None:
            # Collective: every rank learns whether every rank could build its
            # state (all raise, and none starts the save, when one could not)
            # and which plain tensors are replicated or per rank.
            flat, frozen_flags = distributed.prepare_save(self._group, step, build)
        else:
            flat, frozen_flags = build()
        blobs = flat.blobs
        blobs[pytree.STRUCTURE_BLOB] = flat.structure()
        forward = self._written_by_forward(flat.tensors)
        handle = self._c.save(step, flat.names, flat.tensors, blobs,
                              flat.boxes if flat.sharded() else None, forward, frozen_flags)
        if not self.lazy:
            # Eager: nothing may still be reading the state when save() returns.
            self._c.wait_staged()
        return handle

    @property
    def lazy(self) -> bool:
        """Whether save() returns before the copies finished (see attach())."""
        return self._snapshot == "lazy" or (self._snapshot == "auto" and bool(self._hooks))

    def attach(self, model: Optional[torch.nn.Module] = None,
               optimizer: Optional[torch.optim.Optimizer] = None) -> "Checkpointer":
        """Makes snapshots lazy and safe for this training loop: a forward
        pre-hook on `model` waits for the copies of its buffers (and of every
        tensor a save marks as written by the forward) and an optimizer step
        pre-hook on `optimizer` waits for the copies of everything else,
        before either writes. On a GPU the current stream waits on the copy
        (no host synchronisation). May be called for several models and
        optimizers; detach() removes the hooks. Returns self."""
        if model is not None:
            self._hooks.append(model.register_forward_pre_hook(
                lambda module, args: self.before_write("forward")))
            self._attached_modules.append(model)
        if optimizer is not None:
            self._hooks.append(optimizer.register_step_pre_hook(
                lambda opt, args, kwargs: self.before_write("optimizer_step")))
        return self

    def detach(self) -> None:
        """Removes the hooks attach() installed, after waiting for every copy
        still running (the loop may then write the state at any time)."""
        if not self._c.closed:
            self._c.wait_staged()
        for h in self._hooks:
            h.remove()
        self._hooks.clear()
        self._attached_modules.clear()

    def before_write(self, barrier: str = "optimizer_step", timeout: float = 600.0) -> None:
        """The lazy barrier, for loops without attach(): call with "forward"
        before the forward pass and "optimizer_step" before the optimizer
        step. Blocks on CPU copies still running; for CUDA copies the
        stream current at this call (the one the write that follows is
        enqueued on, e.g. inside ``torch.cuda.stream(s)``) waits on the
        device. Without an attached model nothing says
        which tensors the forward writes, so "forward" waits for every copy."""
        if barrier == "forward" and not self._attached_modules:
            barrier = "optimizer_step"
        self._c.before_write(barrier, timeout)

    def wait_staged(self, timeout: float = 600.0) -> None:
        """Blocks until every save's copies (CPU and CUDA) completed: the
        state may then be written by anything."""
        self._c.wait_staged(timeout)

    def _written_by_forward(self, tensors: List[torch.Tensor]) -> Optional[List[bool]]:
        if not self._attached_modules:
            return None
        ptrs = {b.data_ptr() for m in self._attached_modules for b in m.buffers()
                if b.numel() > 0}
        return [t.numel() > 0 and t.data_ptr() in ptrs for t in tensors]

    def flush(self, timeout: float = 600.0) -> None:
        """Waits until every save is durable or failed; raises the first
        failure since the previous flush() that was not raised yet: a save's
        whose durable future nobody asked (result() or exception() hand it out
        instead), or background work's such as retention
        (DeadlineExceededError on timeout)."""
        self._c.flush(timeout)

    # -- loading --------------------------------------------------------------

    def load(self, into: Any = None, *, step: Optional[int] = None, verify: bool = False,
             map_location: Optional[MapLocation] = None, strict: bool = True) -> Any:
        """Loads the newest checkpoint that verifies (or `step`) and returns
        the saved object, rebuilt.

        into: an object of the same shape (e.g. {"model": model.state_dict()})
          whose tensors are filled in place and returned as themselves; shape
          or dtype mismatches raise InvalidArgumentError. Tensors not in
          `into` load as new tensors. With strict (the default), a tensor of
          `into` the checkpoint lacks raises NotFoundError.
        verify: check every checksum before reading (reads are always checked).
        map_location: device for new tensors, or a dict {"cuda:1": "cuda:0"}
          (default: the device saved from; a GPU this process lacks maps to
          the same index modulo the visible GPUs, or to the CPU without any).
        NotFoundError when there is no checkpoint (or no `step`); DataLossError
        when none verifies (UnimplementedError when every one is of a newer
        format version, IoError when none can be read).
        Collective: every rank calls it; a DTensor of `into` is filled with
        its own shard (any mesh and world size), plain tensors whole; all
        ranks load the same step and raise together when one cannot load.
        """
        return self.load_result(into, step=step, verify=verify, map_location=map_location,
                                strict=strict).state

    def load_result(self, into: Any = None, *, step: Optional[int] = None, verify: bool = False,
                    map_location: Optional[MapLocation] = None, strict: bool = True) -> LoadResult:
        """load(), returning a LoadResult (step, state, dir, skipped, skipped_steps)."""
        with pytree.collector_paused():
            return self._load_result(into, step, verify, map_location, strict)

    def _load_result(self, into: Any, step: Optional[int], verify: bool,
                     map_location: Optional[MapLocation], strict: bool) -> LoadResult:
        if step is not None:
            _check_step(step)
        # Collective: the C++ side makes every rank load the same step (the
        # newest step every rank loaded) and all fail when one cannot load.
        plans: Dict[str, Any] = {}
        structure_blob = pytree.STRUCTURE_BLOB
        if self._rank != 0:
            structure_blob = "rank-%05d/%s" % (self._rank, pytree.STRUCTURE_BLOB)

        def planner(reader: _C.CheckpointReader) -> Tuple[List[pytree.InPlace], List[str]]:
            where = reader.dir
            plans.clear()
            blob_names = reader.blob_names()
            if pytree.STRUCTURE_BLOB not in blob_names:
                # Not written from Python (e.g. by the C++ API): a flat {name: tensor}.
                names = [t["name"] for t in reader.tensors()]
                targets = into if isinstance(into, dict) else {}
                taken = {n for n in names if n in targets and _is_tensor(targets[n])}
                in_place = [item for item in (pytree.in_place_item(n, targets[n]) for n in names
                                              if n in taken) if item is not None]
                if strict and isinstance(into, dict):
                    missing = [k for k, v in into.items() if _is_tensor(v) and k not in names]
                    if missing:
                        raise _C.NotFoundError("%s: the checkpoint has no tensor %s" % (
                            where, ", ".join("'%s'" % m for m in missing[:5])))
                plans.update(root=None, in_place=taken, where=where)
                return in_place, [n for n in names if n not in taken]
            # A rank's own structure (its own non-tensor leaves), else rank 0's.
            own = structure_blob if structure_blob in blob_names else pytree.STRUCTURE_BLOB
            root = pytree.parse_structure(reader.read_blob(own), where)
            targets: Dict[str, torch.Tensor] = {}
            if into is None:
                tensor_names = pytree.tensor_names(root)
                if tensor_names is None:
                    raise _C.DataLossError("%s: malformed state structure" % where)
                in_place, fresh = [], tensor_names
            else:
                in_place, fresh = pytree.plan_in_place(root, into, strict, where, targets)
            # Per-rank tensors: this rank's own row (new ones land in `allocated`).
            allocated: Dict[str, torch.Tensor] = {}
            in_place, fresh = distributed.plan_per_rank(
                reader, pytree.per_rank_tensors(root, where), self._rank, in_place, fresh,
                allocated)
            plans.update(root=root, in_place=set(targets), where=where, targets=targets,
                         allocated=allocated)
            return in_place, fresh

        r = self._c.load(planner, step, verify)
        tensors = r["tensors"]
        if plans.get("root") is None:
            state = dict(r["blobs"])
            state.update(tensors)
            for n in plans.get("in_place", ()):
                state[n] = into[n]
            return LoadResult(r["step"], state, r["dir"], r["skipped"], r["skipped_steps"])
        tensors.update(plans["targets"])
        tensors.update(plans["allocated"])
        state = pytree.decode(plans["root"], tensors, r["blobs"], plans["where"], map_location,
                              plans["in_place"])
        return LoadResult(r["step"], state, r["dir"], r["skipped"], r["skipped_steps"])

    # -- the rest -------------------------------------------------------------

    def list_committed(self) -> List[int]:
        """Committed steps, oldest first."""
        return self._c.list_committed()

    def list_replicated(self) -> List[int]:
        """The steps committed on tier 2 (replica_root), oldest first; [] without one."""
        return self._c.list_replicated()

    def latest_step(self) -> Optional[int]:
        """The newest committed step, or None."""
        steps = self._c.list_committed()
        return steps[-1] if steps else None

    def quarantine(self, step: int) -> None:
        """Moves a checkpoint that failed to load aside (quarantine-step-...),
        kept for inspection and never loaded, so the step can be saved again.
        FailedPreconditionError, nothing moved, for a step that a newer
        checkpoint references (incremental; quarantine that one first) or may
        reference (its manifest cannot be read), and for one of a format
        version this build does not know (written by a newer stint)."""
        self._c.quarantine(_check_step(step))

    def mark_complete(self, step: int, info: Optional[Dict[str, Any]] = None) -> None:
        """The run is complete at `step` (a committed step): writes the root's
        COMPLETE marker durably, with `info` (plain JSON values: who finished
        it), so any later start of the run can see it and exit at once
        (stint.Resumable does). Collective: rank 0 writes it."""
        self._c.mark_complete(_check_step(step), json.dumps(info or {}))

    def completion(self) -> Optional[Tuple[int, Dict[str, Any]]]:
        """(final step, info) of the root's COMPLETE marker, or None while the
        run is not complete. DataLossError naming the file for a damaged one."""
        marker = self._c.completion()
        if marker is None:
            return None
        return marker[0], json.loads(marker[1])

    def clear_completion(self) -> None:
        """Removes the COMPLETE marker (to train a finished run further)."""
        self._c.clear_completion()

    def flush_replication(self, timeout: float = 600.0) -> None:
        """Waits until the committed saves are on their replicas: on
        node-local roots, until this node's part of the newest step is held
        by its peer replicas (and the parts this node holds are copied).
        Raises the first replication error, or DeadlineExceededError."""
        self._c.flush_replication(timeout)

    def stats(self) -> Dict[str, Any]:
        """{'saves', 'skipped', 'failed', 'committed', 'last': {...} or None}."""
        return self._c.stats()

    @property
    def root(self) -> str:
        return self._c.root

    @property
    def replica_root(self) -> str:
        """Tier 2 (a path or an s3:// prefix); "" without one."""
        return self._replica_root

    @property
    def collective(self) -> bool:
        """True when saves and loads are collective over a process group."""
        return self._group is not None

    @property
    def process_group(self) -> Any:
        """The process group of a collective checkpointer (None otherwise)."""
        return self._group.pg if self._group is not None else None

    @property
    def rank(self) -> int:
        """This process's rank in the group (0 when not collective)."""
        return self._rank

    @property
    def world_size(self) -> int:
        """The group's size (1 when not collective)."""
        return self._group.world_size if self._group is not None else 1

    @property
    def closed(self) -> bool:
        return self._c.closed

    def close(self) -> None:
        """Waits for pending saves (GIL released) and closes. Idempotent."""
        for h in self._hooks:
            h.remove()
        self._hooks.clear()
        self._attached_modules.clear()
        self._c.close()

    def __enter__(self) -> Checkpointer:
        return self

    def __exit__(self, *exc: Any) -> Literal[False]:
        self.close()
        return False

    def __repr__(self) -> str:
        return "<stint.Checkpointer %s>" % ("closed" if self._c.closed else self._c.root)


def _frozen_flags(frozen: Union[None, Iterable[str], Callable[[str, torch.Tensor], bool]],
                  names: List[str], tensors: List[torch.Tensor]) -> Optional[List[bool]]:
    if frozen is None:
        return None
    if callable(frozen):
        return [bool(frozen(n, t)) for n, t in zip(names, tensors)]
    if isinstance(frozen, str):
        raise TypeError("frozen= takes tensor names (an iterable of str) or a predicate, "
                        "not one string %r" % (frozen,))
    wanted = set(frozen)
    unknown = wanted.difference(names)
    if unknown:
        raise _C.NotFoundError("frozen= names tensors the state does not hold: %s"
                               % ", ".join(sorted(unknown)))
    return [n in wanted for n in names]


def _is_tensor(x: Any) -> bool:
    return isinstance(x, torch.Tensor)


class CheckpointReader:
    """Read-only access to one committed checkpoint directory (step-NNN).

    Opening checks the manifest and every data file's size; every read is
    checked against its checksum; verify() checks them all.
    """

    def __init__(self, dir: PathLike, *, io_engine: str = "auto", direct_io: bool = True,
                 threads: int = 0) -> None:
        self._c = _C.CheckpointReader.open(os.fspath(dir), io_engine, direct_io, threads)

    @property
    def dir(self) -> str:
        return self._c.dir

    @property
    def step(self) -> int:
        return self._c.step

    @property
    def job_id(self) -> str:
        return self._c.job_id

    @property
    def world_size(self) -> int:
        return self._c.world_size

    def tensors(self) -> List[Dict[str, Any]]:
        """[{'name', 'dtype', 'shape', 'shards', 'raw_bytes'}, ...]"""
        return self._c.tensors()

    def blob_names(self) -> List[str]:
        return self._c.blob_names()

    def read_blob(self, name: str) -> bytes:
        return self._c.read_blob(name)

    def read(self, names: Optional[Iterable[str]] = None) -> Dict[str, torch.Tensor]:
        """{name: new CPU tensor} for `names` (all when None)."""
        return self._c.read(None if names is None else list(names))

    def verify(self) -> Dict[str, int]:
        """{'files', 'chunks', 'stored_bytes'}; DataLossError naming the file and chunk."""
        return self._c.verify()

    def state(self, map_location: Optional[MapLocation] = None) -> Any:
        """The whole saved object, rebuilt (as Checkpointer.load does), as
        rank 0 saved it: per-rank tensors of a collective save (plain tensors
        that differed between ranks) are rank 0's row."""
        if pytree.STRUCTURE_BLOB not in self._c.blob_names():
            out: Dict[str, Any] = {n: self._c.read_blob(n) for n in self._c.blob_names()}
            out.update(self._c.read())
            return out
        root = pytree.parse_structure(self._c.read_blob(pytree.STRUCTURE_BLOB), self.dir)
        names = pytree.tensor_names(root)
        if names is None:
            raise _C.DataLossError("%s: malformed state structure" % self.dir)
        tensors = self._c.read(names)
        for name in pytree.per_rank_tensors(root, self.dir):
            tensors[name] = tensors[name][0].clone()
        blobs = {n: self._c.read_blob(n) for n in self._c.blob_names()}
        return pytree.decode(root, tensors, blobs, self.dir, map_location)
