"""stint for PyTorch Lightning 2.x: checkpoints through stint, preemption-safe
and exactly resumable.

    import stint.lightning as sl
    io = sl.CheckpointIO("/nvme/ckpt/job-42")
    trainer = L.Trainer(plugins=[io], callbacks=[sl.Callback(), ModelCheckpoint(
        dirpath="ckpt-links", every_n_train_steps=100, save_last=True)],
        use_distributed_sampler=False)
    trainer.fit(model, ckpt_path="last")        # the newest durable stint step
    # a notice (SIGTERM, SIGUSR1) ends fit() with SystemExit(75) after an
    # emergency checkpoint at a step boundary

CheckpointIO: every save Lightning makes (ModelCheckpoint, trainer.
save_checkpoint) becomes an asynchronous stint save of step global_step
(one per step: last.ckpt and the top-k file of the same step are one save);
the file at Lightning's path is a small pointer (JSON: root and step).
Loading a pointer named last*.ckpt or hpc_ckpt_*.ckpt loads the newest
step of the root that verifies (ckpt_path="last" resumes from the newest
durable step, even one newer than the pointer); another pointer loads its
own step. remove_checkpoint() removes the pointer only: stint's keep_last /
keep_every decide which steps stay. Objects stint cannot store as they are
(anything but tensors, containers and plain values) are kept pickled.
Saves are made by global rank 0 (DDP, and FSDP with state_dict_type="full":
Lightning gathers there); the save copies the state and returns, the
write, checksum and atomic commit run in the background.

Callback: the step boundary (on_train_batch_end). It commits the cursor of
a stint.ResumableSampler used as the train loader's batch_sampler (make it
with sl.ResumableSampler, whose len() is a whole epoch as Lightning's loop
counts it, and set use_distributed_sampler=False), saves every rank's global
RNGs with the checkpoint and restores them before the first resumed batch
(a train loader without a generator is given one, so that making an
epoch's iterator does not draw from them; DataLoader workers' seeds are
not restored),
and acts on stint's preemption notice: every rank agrees to stop at the
same step (one all-reduce per step), takes an emergency checkpoint
(<ModelCheckpoint.dirpath>/last.ckpt), waits until it is durable and raises
SystemExit(75) (stint.EXIT_REQUEUE) out of trainer.fit().

Lightning's own SIGTERM handling (which ends the run with exit 1) and
SLURMEnvironment's auto-requeue (SIGUSR1: an hpc_ckpt_N.ckpt saved inside
the signal handler, mid-step, then scontrol requeue) are replaced while the
callback watches (from on_train_start): stint wins, because it stops at a
step boundary, waits for durability and exits 75. Under Slurm it records
the stop in the root and requeues as stint.Resumable does (stint.slurm).
Callback(preemption=False) leaves the signals to Lightning: its hpc
checkpoints are then saved through CheckpointIO too, and resume through it.
"""

from __future__ import annotations

import collections
import json
import logging
import os
import pickle
import signal
from typing import Any, Dict, List, Optional

import torch
import torch.distributed as dist

try:
    import lightning.pytorch as pl
    from lightning.fabric.plugins import CheckpointIO as _CheckpointIO
except ImportError:  # the standalone pytorch-lightning package
    import pytorch_lightning as pl  # type: ignore[no-redef]
    from lightning_fabric.plugins import CheckpointIO as _CheckpointIO  # type: ignore[no-redef]

from . import _C
from . import slurm
from .checkpointer import Checkpointer
from .preemption import PreemptionWatcher
from .rng import capture_rng, restore_rng
from .sampler import ResumableSampler as _ResumableSampler

_log = logging.getLogger("stint")

POINTER_FORMAT = "stint.lightning.pointer"
_PICKLED = "__stint_pickled__"


def _is_latest(path: str) -> bool:
    name = os.path.basename(path)
    return name.startswith("last") or name.startswith("hpc_ckpt_")


def _write_pointer(path: str, root: str, step: int) -> None:
    """Writes the pointer file atomically and durably (tmp, fsync, rename, fsync dir)."""
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    tmp = "%s.tmp-%d" % (path, os.getpid())
    with open(tmp, "w") as f:
        json.dump({"format": POINTER_FORMAT, "root": root, "step": step}, f)
        f.flush()
        os.fsync(f.fileno())
    if os.path.islink(path):
        os.unlink(path)
    os.replace(tmp, path)
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read_pointer(path: str) -> Dict[str, Any]:
    """{'root', 'step'} of a pointer file CheckpointIO wrote."""
    try:
        with open(path) as f:
            p = json.load(f)
    except (UnicodeDecodeError, ValueError):
        p = None
    if not isinstance(p, dict) or p.get("format") != POINTER_FORMAT:
        raise _C.InvalidArgumentError("%s is not a stint checkpoint pointer (a torch.save file? "
                                      "load it without stint.lightning.CheckpointIO)" % path)
    return p


def _encode(x: Any) -> Any:
    """Lightning's checkpoint dict with the leaves stint cannot store pickled."""
    if x is None or type(x) in (bool, int, float, str, bytes) or isinstance(x, (torch.Tensor,
                                                                              torch.dtype,
                                                                              torch.device)):
        return x
    if isinstance(x, dict) and all(k is None or type(k) in (str, int, float, bool) for k in x):
        out: Dict[Any, Any] = collections.OrderedDict() if isinstance(
            x, collections.OrderedDict) else {}
        for k, v in x.items():
            out[k] = _encode(v)
        if hasattr(x, "_metadata"):  # a module's state_dict(): its version numbers
            out._metadata = x._metadata  # type: ignore[attr-defined]
        return out
    if type(x) in (list, tuple):
        return type(x)(_encode(v) for v in x)
    return {_PICKLED: pickle.dumps(x)}


def _decode(x: Any) -> Any:
    if isinstance(x, dict):
        if len(x) == 1 and _PICKLED in x:
            return pickle.loads(x[_PICKLED])
        for k in list(x):
            x[k] = _decode(x[k])
        return x
    if type(x) is list:
        return [_decode(v) for v in x]
    if type(x) is tuple:
        return tuple(_decode(v) for v in x)
    return x


class CheckpointIO(_CheckpointIO):
    """Lightning CheckpointIO plugin writing through stint (see the module doc).

    root: the stint checkpoint root (a path every rank sees). Keyword
    arguments go to stint.Checkpointer (keep_last=3, compress, ...)."""

    def __init__(self, root: Any, **checkpoint_options: Any) -> None:
        super().__init__()
        self.root = os.path.abspath(os.fspath(root))
        self.options = checkpoint_options
        self._writer: Optional[Checkpointer] = None
        self._reader: Optional[Checkpointer] = None
        self._pending: Dict[int, Any] = {}         # step -> durable future
        self._latest_pointers: List[Any] = []     # (path, step) written once durable
        self.last_durable_step: Optional[int] = None

    @property
    def checkpointer(self) -> Checkpointer:
        """The writer (this process only: Lightning saves from global rank 0)."""
        if self._writer is None:
            if self._reader is not None:
                self._reader.close()
                self._reader = None
            self._writer = Checkpointer(self.root, collective=False, **self.options)
        return self._writer

    def save_checkpoint(self, checkpoint: Dict[str, Any], path: Any,
                        storage_options: Optional[Any] = None) -> None:
        if storage_options is not None:
            raise TypeError("stint.lightning.CheckpointIO takes no storage_options (got %r)"
                            % (storage_options,))
        step = int(checkpoint.get("global_step", 0))
        ckpt = self.checkpointer
        if step not in self._pending and step not in ckpt.list_committed():
            handle = ckpt.save(step, _encode(checkpoint))
            if handle.skipped:
                handle.durable.result()  # raises why
            self._pending[step] = handle.durable
        path = os.fspath(path)
        if _is_latest(path):
            # "the newest durable step": pointed at once it is durable.
            self._latest_pointers.append((path, step))
        else:
            _write_pointer(path, self.root, step)
        self.poll()

    def poll(self) -> None:
        """Notes the saves that became durable; writes the last*.ckpt pointers
        whose step is. Raises a save's failure."""
        for step, durable in list(self._pending.items()):
            if durable.done():
                del self._pending[step]
                durable.result()
                if self.last_durable_step is None or step > self.last_durable_step:
                    self.last_durable_step = step
        waiting = []
        for path, step in self._latest_pointers:
            if step in self._pending:
                waiting.append((path, step))
            else:
                _write_pointer(path, self.root, step)
        self._latest_pointers = waiting

    def wait(self, timeout: float = 600.0) -> None:
        """Until every save is durable (and its pointers written)."""
        if self._writer is not None:
            for durable in self._pending.values():
                durable.result(timeout)
            self.poll()

    def load_checkpoint(self, path: Any, map_location: Optional[Any] = None,
                        weights_only: Optional[bool] = None) -> Dict[str, Any]:
        path = os.fspath(path)
        pointer = read_pointer(path)
        ckpt = self._writer
        if ckpt is None or pointer["root"] != self.root:
            if self._reader is None or self._reader.root != pointer["root"]:
                if self._reader is not None:
                    self._reader.close()
                self._reader = Checkpointer(pointer["root"], read_only=True, collective=False)
            ckpt = self._reader
        step = None if _is_latest(path) else int(pointer["step"])
        location = map_location if isinstance(map_location, (str, torch.device, dict)) else None
        return _decode(ckpt.load(step=step, map_location=location))

    def remove_checkpoint(self, path: Any) -> None:
        path = os.fspath(path)
        self._latest_pointers = [(p, s) for p, s in self._latest_pointers if p != path]
        if os.path.lexists(path):
            os.unlink(path)

    def teardown(self) -> None:
        self.close()

    def close(self) -> None:
        """Waits for every save, writes the pending pointers and closes."""
        try:
            self.wait()
        finally:
            for c in (self._writer, self._reader):
                if c is not None:
                    c.close()
            self._writer = self._reader = None


class ResumableSampler(_ResumableSampler):
    """stint.ResumableSampler whose len() is a whole epoch: Lightning's loop
    counts the batches of an epoch from len() and its own progress, also
    when it resumes in the middle of one (the iterator then yields the rest)."""

    def __len__(self) -> int:
        return self.steps_per_epoch


class Callback(pl.Callback):
    """The step boundary for stint (see the module doc). preemption=False
    leaves the signals to Lightning (and to SLURMEnvironment's requeue);
    signals, grace and safety as for stint.PreemptionWatcher."""

    def __init__(self, *, preemption: bool = True, signals: Optional[List[int]] = None,
                 grace: Optional[float] = None, safety: Optional[float] = None) -> None:
        self.preemption = preemption
        self.signals = signals
        self.grace = grace
        self.safety = safety
        self.watcher: Optional[PreemptionWatcher] = None
        self.sampler: Optional[_ResumableSampler] = None
        self._restored: Optional[Dict[str, Any]] = None
        self._step_seen = -1
        self.launch: Optional[Dict[str, Any]] = None  # stint's view of the launcher (Slurm)

    @property
    def state_key(self) -> str:
        return "stint.lightning.Callback"

    # -- state ------------------------------------------------------------------

    def state_dict(self) -> Dict[str, Any]:
        # Called on every rank while Lightning builds a checkpoint: gather every rank's RNGs.
        rng = capture_rng()
        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            rows: List[Any] = [None] * dist.get_world_size()
            dist.all_gather_object(rows, rng)
        else:
            rows = [rng]
        state: Dict[str, Any] = {"rng": rows}
        if self.sampler is not None:
            state["sampler"] = self.sampler.state_dict()["stint_sampler"]
        return state

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        self._restored = dict(state)

    def _io(self, trainer: Any) -> CheckpointIO:
        io = trainer.strategy.checkpoint_io
        if not isinstance(io, CheckpointIO):
            raise _C.FailedPreconditionError(
                "stint.lightning.Callback needs Trainer(plugins=[stint.lightning.CheckpointIO(root)])"
                ", the trainer's CheckpointIO is %s" % type(io).__name__)
        return io

    # -- hooks ------------------------------------------------------------------

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        self._io(trainer)
        loader = trainer.train_dataloader
        for owner in (loader, getattr(loader, "batch_sampler", None)):
            for name in ("batch_sampler", "sampler"):
                s = getattr(owner, name, None)
                if isinstance(s, _ResumableSampler):
                    self.sampler = s
        if getattr(loader, "generator", 1) is None:
            # Else each new epoch's iterator draws its base seed from the global
            # RNG, after the checkpoint at the end of the epoch before: the RNG
            # restored at resume would be one draw behind the uninterrupted run's.
            loader.generator = torch.Generator().manual_seed(
                int(torch.empty((), dtype=torch.int64).random_().item()))
        if self._restored is not None and "sampler" in self._restored:
            if self.sampler is None:
                raise _C.FailedPreconditionError(
                    "the checkpoint holds a stint.ResumableSampler's cursor, but the train "
                    "loader has none as its batch_sampler")
            self.sampler.load_state_dict(self._restored["sampler"])
        self._step_seen = trainer.global_step
        try:
            self.launch = _C.launch_env()
        except _C.InvalidArgumentError:  # Lightning's DDP children: LOCAL_RANK without RANK
            self.launch = None
        if self.preemption:
            # After Lightning installed its handlers (in fit(), after on_fit_start):
            # its SIGTERM handler and SLURMEnvironment's SIGUSR1 one are not
            # chained (stint's watcher chains what it finds installed).
            signals = list(self.signals or [signal.SIGTERM, signal.SIGUSR1])
            if self._slurm() and self.signals is None:
                signals.append(signal.SIGUSR2)
            for s in signals:
                signal.signal(s, signal.SIG_DFL)
            self.watcher = PreemptionWatcher(signals, grace=self.grace, safety=self.safety)

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any,
                             batch_idx: int) -> None:
        # The first batch after a resume: the RNGs as the checkpoint saw them
        # (after the loader's iterator was made, which may draw from them).
        if self._restored is not None:
            rows = self._restored.get("rng") or []
            if rows:
                rank = trainer.global_rank
                restore_rng(rows[rank] if rank < len(rows) else rows[0])
            self._restored = None

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        if self.sampler is not None:
            self.sampler.commit_step()
        io = self._io(trainer)
        if trainer.is_global_zero:
            io.poll()
        if trainer.global_step == self._step_seen:  # accumulating: not a step boundary
            return
        self._step_seen = trainer.global_step
        if self.watcher is not None and self._agree(self.watcher.requested):
            self._stop(trainer, io)

    def _agree(self, flag: bool) -> bool:
        if not (dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1):
            return flag
        t = torch.tensor([1.0 if flag else 0.0], dtype=torch.float64)
        if dist.get_backend() == "nccl":
            t = t.cuda()
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return bool(t.item())

    def _stop(self, trainer: Any, io: CheckpointIO) -> None:
        assert self.watcher is not None
        self.watcher.keep_until_exit()
        step = trainer.global_step
        dirpath = getattr(trainer.checkpoint_callback, "dirpath", None) or trainer.default_root_dir
        trainer.save_checkpoint(os.path.join(dirpath, "last.ckpt"))  # collective
        if trainer.is_global_zero:
            notice = self.watcher.notice()
            io.wait(max(1.0, notice.seconds_to_deadline) if notice is not None else 600.0)
        trainer.strategy.barrier("stint.lightning.preempted")
        if self._slurm():
            assert self.launch is not None
            slurm.record_decision(self.launch, io.root, trainer.global_rank, step, step)
            slurm.requeue_at_exit(self.launch, trainer.global_rank)
        _log.warning("stint: preempted at step %d: checkpoint durable, exiting %d",
                     step, _C.EXIT_REQUEUE)
        raise SystemExit(_C.EXIT_REQUEUE)

    def _slurm(self) -> bool:
        return self.launch is not None and slurm.under_slurm(self.launch)

    def teardown(self, trainer: Any, pl_module: Any, stage: str) -> None:
        if self.watcher is not None and not self.watcher.requested:
            self.watcher.uninstall()
            self.watcher = None
