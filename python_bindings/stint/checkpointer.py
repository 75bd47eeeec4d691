"""stint.Checkpointer: asynchronous, crash-consistent checkpoints of nested
state dicts (model.state_dict(), optimizer.state_dict(), plain values).

    ckpt = stint.Checkpointer("/nvme/ckpt/job-42", keep_last=3)
    staged, durable = ckpt.save(step, {"model": model.state_dict(),
                                       "optim": optimizer.state_dict(), "epoch": 3})
    # save() returns once the state is copied (staged is already done): train on.
    durable.result()                      # committed on disk (GIL released while waiting)

    state = ckpt.load()                   # newest checkpoint that verifies, new tensors
    ckpt.load(into={"model": model.state_dict()}, strict=False)  # fill in place

save() copies every tensor into a bounded staging pool on the calling
thread (the only time training stalls), then background threads checksum,
optionally compress, write with io_uring + O_DIRECT and commit atomically.
A checkpoint that fails verification is never loaded: load() falls back to
the newest older one that verifies and reports what it skipped
(load_result().skipped); errors raise stint exceptions carrying the
runtime's message.

Thread-compatible: use one Checkpointer from one thread at a time.
"""

import os

import torch

from . import _C
from . import pytree


def _check_step(step):
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise _C.InvalidArgumentError("step must be a non-negative int, got %r" % (step,))
    return step


class LoadResult:
    """What load_result() returns."""

    __slots__ = ("step", "state", "dir", "skipped", "skipped_steps")

    def __init__(self, step, state, dir, skipped, skipped_steps):
        self.step = step                    # the step of the checkpoint loaded
        self.state = state                  # the rebuilt object
        self.dir = dir                      # its directory
        self.skipped = skipped              # newer checkpoints passed over: "step-...: error"
        self.skipped_steps = skipped_steps  # the same, as steps

    def __repr__(self):
        return "<stint.LoadResult step %d from %s%s>" % (
            self.step, self.dir, ", skipped %s" % self.skipped_steps if self.skipped_steps else "")


class Checkpointer:
    """Checkpoints of one process's state under `root` (created if missing).

    Options (all keyword-only; defaults as in the C++ CheckpointOptions):
      keep_last=3        newest K committed checkpoints kept (0: all)
      keep_every=0       also keep steps divisible by N forever
      compress=False     zstd per chunk; zstd_level=1
      chunk_size=8 MiB   multiple of 4096
      staging_bytes=0    staging pool size (0: twice the first snapshot)
      busy_policy="block" or "skip" when the staging pool is full; block_timeout=600 s
      io_engine="auto"   "uring" or "posix" (STINT_IO overrides); direct_io=True
      io_queue_depth=32, io_size=4 MiB, threads=0 (hardware threads - 1)
      job_id="", fencing_token=0   recorded in the manifest
    """

    def __init__(self, root, **options):
        self._c = _C.Checkpointer(os.fspath(root), **options)

    # -- saving ---------------------------------------------------------------

    def save(self, step, state):
        """Checkpoints `state` as step `step`. Returns a SaveHandle that
        unpacks as (staged, durable) futures; `state` may be modified as soon
        as save() returns. AlreadyExistsError if the step is committed
        already; a background failure of an earlier save is raised here once.
        """
        _check_step(step)
        flat = pytree.flatten(state)
        blobs = flat.blobs
        blobs[pytree.STRUCTURE_BLOB] = flat.structure
        return self._c.save(step, flat.names, flat.tensors, blobs)

    def flush(self, timeout=600.0):
        """Waits until every save is durable or failed; raises the first
        background error not raised yet (DeadlineExceededError on timeout)."""
        self._c.flush(timeout)

    # -- loading --------------------------------------------------------------

    def load(self, into=None, *, step=None, verify=False, map_location=None, strict=True):
        """Loads the newest checkpoint that verifies (or `step`) and returns
        the saved object, rebuilt.

        into: an object of the same shape (e.g. {"model": model.state_dict()})
          whose tensors are filled in place and returned as themselves; shape
          or dtype mismatches raise InvalidArgumentError. Tensors not in
          `into` load as new tensors. With strict (the default), a tensor of
          `into` the checkpoint lacks raises NotFoundError.
        verify: check every checksum before reading (reads are always checked).
        map_location: device for new tensors (default: the device saved from).
        NotFoundError when there is no checkpoint; DataLossError when none
        verifies.
        """
        return self.load_result(into, step=step, verify=verify, map_location=map_location,
                                strict=strict).state

    def load_result(self, into=None, *, step=None, verify=False, map_location=None, strict=True):
        """load(), returning a LoadResult (step, state, dir, skipped, skipped_steps)."""
        if step is not None:
            _check_step(step)
        plans = {}

        def planner(reader):
            where = reader.dir
            plans.clear()
            if pytree.STRUCTURE_BLOB not in reader.blob_names():
                # Not written from Python (e.g. by the C++ API): a flat {name: tensor}.
                names = [t["name"] for t in reader.tensors()]
                targets = into if isinstance(into, dict) else {}
                in_place = [(n, targets[n]) for n in names if n in targets and _is_tensor(targets[n])]
                taken = {n for n, _ in in_place}
                if strict and isinstance(into, dict):
                    missing = [k for k, v in into.items() if _is_tensor(v) and k not in names]
                    if missing:
                        raise _C.NotFoundError("%s: the checkpoint has no tensor %s" % (
                            where, ", ".join("'%s'" % m for m in missing[:5])))
                plans.update(root=None, in_place=taken, where=where)
                return in_place, [n for n in names if n not in taken]
            root = pytree.parse_structure(reader.read_blob(pytree.STRUCTURE_BLOB), where)
            if into is None:
                names = pytree.tensor_names(root)
                if names is None:
                    raise _C.DataLossError("%s: malformed state structure" % where)
                in_place, fresh = [], names
            else:
                in_place, fresh = pytree.plan_in_place(root, into, strict, where)
            plans.update(root=root, in_place={n for n, _ in in_place}, where=where,
                         targets=dict(in_place))
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
        state = pytree.decode(plans["root"], tensors, r["blobs"], plans["where"], map_location,
                              plans["in_place"])
        return LoadResult(r["step"], state, r["dir"], r["skipped"], r["skipped_steps"])

    # -- the rest -------------------------------------------------------------

    def list_committed(self):
        """Committed steps, oldest first."""
        return self._c.list_committed()

    def latest_step(self):
        """The newest committed step, or None."""
        steps = self._c.list_committed()
        return steps[-1] if steps else None

    def quarantine(self, step):
        """Moves a checkpoint that failed to load aside (quarantine-step-...),
        kept for inspection and never loaded, so the step can be saved again."""
        self._c.quarantine(_check_step(step))

    def stats(self):
        """{'saves', 'skipped', 'failed', 'committed', 'last': {...} or None}."""
        return self._c.stats()

    @property
    def root(self):
        return self._c.root

    @property
    def closed(self):
        return self._c.closed

    def close(self):
        """Waits for pending saves (GIL released) and closes. Idempotent."""
        self._c.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __repr__(self):
        return "<stint.Checkpointer %s>" % ("closed" if self._c.closed else self._c.root)


def _is_tensor(x):
    return isinstance(x, torch.Tensor)


class CheckpointReader:
    """Read-only access to one committed checkpoint directory (step-NNN).

    Opening checks the manifest and every data file's size; every read is
    checked against its checksum; verify() checks them all.
    """

    def __init__(self, dir, *, io_engine="auto", direct_io=True, threads=0):
        self._c = _C.CheckpointReader.open(os.fspath(dir), io_engine, direct_io, threads)

    dir = property(lambda self: self._c.dir)
    step = property(lambda self: self._c.step)
    job_id = property(lambda self: self._c.job_id)
    world_size = property(lambda self: self._c.world_size)

    def tensors(self):
        """[{'name', 'dtype', 'shape', 'shards', 'raw_bytes'}, ...]"""
        return self._c.tensors()

    def blob_names(self):
        return self._c.blob_names()

    def read_blob(self, name):
        return self._c.read_blob(name)

    def read(self, names=None):
        """{name: new CPU tensor} for `names` (all when None)."""
        return self._c.read(None if names is None else list(names))

    def verify(self):
        """{'files', 'chunks', 'stored_bytes'}; DataLossError naming the file and chunk."""
        return self._c.verify()

    def state(self, map_location=None):
        """The whole saved object, rebuilt (as Checkpointer.load does)."""
        if pytree.STRUCTURE_BLOB not in self._c.blob_names():
            out = {n: self._c.read_blob(n) for n in self._c.blob_names()}
            out.update(self._c.read())
            return out
        root = pytree.parse_structure(self._c.read_blob(pytree.STRUCTURE_BLOB), self.dir)
        names = pytree.tensor_names(root)
        if names is None:
            raise _C.DataLossError("%s: malformed state structure" % self.dir)
        tensors = self._c.read(names)
        blobs = {n: self._c.read_blob(n) for n in self._c.blob_names()}
        return pytree.decode(root, tensors, blobs, self.dir, map_location)
