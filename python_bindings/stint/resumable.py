"""stint.Resumable: the few lines a PyTorch training loop adds to become
preemption-safe and exactly resumable.

    run = stint.Resumable(args.ckpt, model=model, optimizer=opt, sampler=sampler, save_every=50)
    step = run.resume()                           # 0 on a fresh start
    while step < total_steps:
        for x, y in loader:                       # DataLoader(batch_sampler=sampler, ...)
            ...forward, backward, opt.step()...
            step += 1
            if run.step_boundary(step):           # commit the data cursor, periodic save, preemption
                sys.exit(stint.EXIT_REQUEUE)      # 75: emergency checkpoint taken, run me again
            ...
    run.finish(step)                              # final checkpoint, durable

A checkpoint holds the model's and the optimizer's state_dict(), the
sampler's cursor and data fingerprint, every global RNG (torch CPU and CUDA,
Python random, numpy), the step, the state_dict() of each object passed in
`objects` (an LR scheduler, a GradScaler), `user_state` (plain values) and,
with `loader=`, the DataLoader's position. resume() restores all of it from
the newest checkpoint that verifies; newer ones it passes over are reported
(logged, and in resume_skipped); the damaged ones are quarantined, those of a
newer format version (written by a newer stint) or unreadable now are left in
place.

On a preemption notice (SIGTERM or SIGUSR1 by default), step_boundary()
takes an emergency checkpoint when it fits the remaining grace at the
measured throughput, otherwise logs how many steps will be lost, then
returns True: exit with stint.EXIT_REQUEUE (75) so the scheduler requeues
the job. From then on, and after finish(), the preemption signals stay
caught until the process exits (PreemptionWatcher.keep_until_exit()): a
signal arriving while the process winds down cannot turn exit 75, or exit 0
of a completed run, into a kill.

In a distributed job (DDP, FSDP: torch.distributed initialised, so the
Checkpointer is collective) every rank makes the Resumable, with the same
options, and calls the same methods at the same steps. step_boundary()
all-reduces the stop decision once per step (one 16-byte all-reduce on the
checkpointer's process group; on a CUDA tensor for NCCL): a notice on any
rank stops every rank at the same step, with one emergency checkpoint
whose deadline is the earliest rank's, taken only if it fits on every rank.
(FSDP2: resume() fills the model's shards in place and shards the
optimizer's state like its parameters again, each rank slicing its own
part.) Under torchrun, run `python -m stint.torchrun` in its place so the launcher
exits 75 too when its workers did (see stint.torchrun.main).

Data: pass the DataLoader as `loader=` (a ResumableSampler that is its
batch_sampler is then taken as `sampler`) and read batches with
run.iterate() instead of the loader itself:

    run = stint.Resumable(root, model=model, optimizer=opt, loader=loader)
    step = run.resume()
    while step < total_steps:
        for x, y in run.iterate():                # one epoch, as `for x, y in loader`
            ...

A checkpoint then holds the state of the loader's generators as the
epoch's iterator was created from them and how many batches the epoch
yielded; resume() puts the generators back, creates the iterator (which
draws from them, and maybe from the global RNG), skips the batches trained
on already (reading them, as the interrupted run did; a loader with
state_dict()/load_state_dict(), such as torchdata's StatefulDataLoader, is
restored through those instead, and a ResumableSampler needs no skipping)
and only then restores the global RNGs, so the next batch, its
augmentations and the model's dropout all match the uninterrupted run.
A loader without a generator is given one (seeded from the global torch
RNG when the Resumable is made), and a RandomSampler without one gets the
loader's: a DataLoader otherwise draws from the global RNG whenever an
iterator is made.

With both a model and an optimizer, snapshots are lazy (see
Checkpointer.attach()): the training thread does not wait for the copy. The
tensors in `objects`' state_dict()s must then not be changed in place
before the next optimizer step (LR schedulers and GradScaler hold plain
numbers); pass snapshot="eager" otherwise.

Thread-compatible: the training thread owns it.
"""

from __future__ import annotations

import logging
import math
import os
import signal
import time
from typing import (TYPE_CHECKING, Any, Callable, Dict, Iterable, Iterator, List, Literal, Mapping,
                    Optional, Tuple)

import torch
import torch.distributed
import torch.utils.data

from . import _C
from . import distributed
from . import slurm
from .checkpointer import Checkpointer, _check_step
from .preemption import PreemptionWatcher
from .rng import capture_rng, restore_rng
from .sampler import ResumableSampler

if TYPE_CHECKING:
    from .checkpointer import PathLike

_log = logging.getLogger("stint")


class Resumable:
    def __init__(self, root: PathLike, *, model: Optional[torch.nn.Module] = None,
                 optimizer: Optional[torch.optim.Optimizer] = None,
                 sampler: Optional[ResumableSampler] = None, objects: Optional[Mapping[str, Any]] = None,
                 loader: Any = None, save_every: int = 100, watch_signals: bool = True,
                 signals: Optional[Iterable[int]] = None, grace: Optional[float] = None,
                 safety: Optional[float] = None,
                 on_preemption: Optional[Callable[[_C.PreemptionPlan], Any]] = None,
                 exit_if_complete: bool = True,
                 **checkpoint_options: Any) -> None:
        """root: the checkpoint directory. save_every: asynchronous checkpoint
        every N steps (0: only on preemption and finish()). objects: {name:
        object with state_dict()/load_state_dict()}. loader: the DataLoader
        the loop reads through iterate() (see the module doc; its
        ResumableSampler is taken as `sampler` when that is not given).
        watch_signals: install a PreemptionWatcher (signals, grace, safety as
        there; the same on every rank). on_preemption: called with the
        PreemptionPlan at the step boundary that acts on a notice.
        exit_if_complete: resume() of a run whose root holds the COMPLETE
        marker finish() writes exits 0 at once (False: resumes its final
        step; Checkpointer.clear_completion() to train it further). Other
        keyword arguments go to stint.Checkpointer (under
        stint-agent its commits are fenced by default: see its fencing=).
        Under Slurm (srun, no torchrun) it initialises torch.distributed
        from Slurm's variables when that is not done yet, also watches
        SIGUSR2 and the job's end time, and requeues the job after a
        stop (see stint.slurm)."""
        self.launch = _C.launch_env()
        self._slurm = slurm.under_slurm(self.launch)
        if self._slurm and checkpoint_options.get("collective", None) is not False \
                and checkpoint_options.get("process_group") is None:
            distributed.init_from_env()
        if signals is None and self._slurm:
            signals = [signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2]
        if sampler is None and loader is not None:
            sampler = next((s for s in (getattr(loader, "batch_sampler", None),
                                        getattr(loader, "sampler", None))
                            if isinstance(s, ResumableSampler)), None)
        self.model = model
        self.optimizer = optimizer
        self.sampler = sampler
        self.loader = loader
        self._loader_generators = _own_generators(loader) if loader is not None else []
        # What the loop's current epoch started from (see iterate()).
        self._epoch_started = False
        self._epoch_generator_states: List[bytes] = []
        self._epoch_batches = 0
        self._resumed_iterator: Optional[Iterator[Any]] = None
        self._warned_loader_unused = False
        self.objects = dict(objects or {})
        self.save_every = int(save_every)
        self.on_preemption = on_preemption
        self.exit_if_complete = exit_if_complete
        self.user_state: Dict[str, Any] = {}
        self.exit_code = 0
        self.last_plan: Optional[_C.PreemptionPlan] = None
        self.resume_skipped: List[str] = []
        self.last_durable_step: Optional[int] = None
        # The last emergency checkpoint: seconds from the notice (as this
        # rank's watcher received it) to durable and on its replicas (tier 2; on node-local roots, this
        # node's part held by its peers); None when it did not get there.
        self.notice_to_replicas_seconds: Optional[float] = None
        self._last_saved_step: Optional[int] = None
        self._pending: List[Tuple[int, _C.Future]] = []  # (step, durable future)
        self._replicating: List[Tuple[int, _C.Future]] = []  # (step, tier-2 future)
        self.checkpointer = Checkpointer(root, **checkpoint_options)
        # Under stint-agent: the step and the loss passed to step_boundary()
        # go to stintd (the job's loss curve and efficiency figures).
        self._progress: Optional[_C.ProgressReporter] = _C.ProgressReporter.from_environment()
        self._loss_reported_at = -math.inf  # monotonic time of the last loss read
        if model is not None and optimizer is not None:
            # Lazy snapshots: a save returns at once and its copies run during
            # the next forward and backward; the hooks wait before the forward
            # (buffers) and the optimizer step (parameters, optimizer state).
            self.checkpointer.attach(model, optimizer)
        self.watcher: Optional[PreemptionWatcher] = None
        self._end_clock: Optional[_C.SlurmEndClock] = None  # the job's time limit (Slurm)
        if watch_signals:
            try:
                self.watcher = PreemptionWatcher(signals, grace=grace, safety=safety)
                if self._slurm:
                    end = slurm.job_end_time(self.launch, self._group())
                    if end is not None:
                        self._end_clock = _C.SlurmEndClock(end, 2.0 if safety is None else safety)
            except BaseException:
                self.close()
                raise

    # -- state ------------------------------------------------------------------

    def state(self, step: int) -> Dict[str, Any]:
        """The object a checkpoint of `step` holds."""
        s = {"step": step, "rng": capture_rng(), "user": self.user_state,
             "launch": self._launch_info()}
        if self.model is not None:
            s["model"] = self.model.state_dict()
        if self.optimizer is not None:
            s["optim"] = self.optimizer.state_dict()
        if self.sampler is not None:
            s["sampler"] = self.sampler.state_dict()
        if self.objects:
            s["objects"] = {name: obj.state_dict() for name, obj in self.objects.items()}
        if self.loader is not None:
            s["loader"] = self._loader_state()
        return s

    def resume(self) -> int:
        """Restores the newest checkpoint that verifies; returns its step, or 0
        when there is none. A root whose run completed (finish() wrote its
        COMPLETE marker) exits 0 here, unless exit_if_complete=False."""
        marker = self.checkpointer.completion()
        # Every rank decides alike, also where roots differ per node (a
        # replacement node's root has no marker and no step of its own).
        if not self._all_ranks(marker is None) and self.exit_if_complete:
            if marker is not None:
                _log.warning("stint: %s: this run completed at step %d (%s): nothing to do, "
                             "exiting 0", self.checkpointer.root, marker[0], marker[1])
            else:
                _log.warning("stint: another node's root says this run completed: nothing to "
                             "do, exiting 0")
            self.close()
            raise SystemExit(0)
        # A fresh start only when no tier holds a checkpoint: a node whose
        # local root is empty resumes from tier 2 (a shared path, a bucket).
        if self._all_ranks(not self.checkpointer.list_committed()
                           and not self.checkpointer.list_replicated()):
            return 0
        into = {"model": self.model.state_dict()} if self.model is not None else None
        # Model tensors are read straight into the parameters; the rest is new.
        r = self.checkpointer.load_result(into=into, strict=False)
        skipped = list(r.skipped)
        for line in skipped:
            _log.warning("stint: resume skipped a checkpoint: %s", line)
        # Only damage is quarantined: a checkpoint of a newer format version,
        # or one that could not be read now, is not in skipped_steps.
        for damaged in r.skipped_steps:
            try:
                self.checkpointer.quarantine(damaged)
            except _C.FailedPreconditionError as e:  # a newer checkpoint still needs it
                _log.warning("stint: %s", e)
                skipped.append(str(e))
        self.resume_skipped = skipped
        s = r.state
        if not isinstance(s, dict) or "step" not in s or "rng" not in s:
            raise _C.DataLossError("%s: not a checkpoint written by stint.Resumable" % r.dir)
        for key, obj in (("model", self.model), ("optim", self.optimizer), ("sampler", self.sampler)):
            if obj is None:
                continue
            if key not in s:
                raise _C.FailedPreconditionError("%s: the checkpoint holds no '%s' state" % (r.dir, key))
            # For the model a copy onto itself (already in place); it checks the keys
            # and restores non-tensor extra state.
            obj.load_state_dict(_sharded_like_params(obj, s[key]) if key == "optim" else s[key])
        for name, obj in self.objects.items():
            saved = s.get("objects", {})
            if name not in saved:
                raise _C.FailedPreconditionError("%s: the checkpoint holds no state for object '%s'"
                                                 % (r.dir, name))
            obj.load_state_dict(saved[name])
        if self.loader is not None:
            if "loader" not in s:
                raise _C.FailedPreconditionError("%s: the checkpoint holds no 'loader' state" % r.dir)
            self._resume_loader(s["loader"], r.dir)
        # Last: making the loader's iterator above may have drawn from the global RNGs.
        restore_rng(s["rng"])
        self.user_state = dict(s.get("user") or {})
        step = int(s["step"])
        self.last_durable_step = self._last_saved_step = step
        saved_by = s.get("launch") or {}
        _log.info("stint: resumed at step %d from %s%s (saved by %s)", step, r.dir,
                  " as Slurm job %s, restart %d" % (self.launch["job_id"], self.launch["restart_count"])
                  if self._slurm else "", saved_by or "an older stint")
        return step

    # -- the loop -------------------------------------------------------------------

    def iterate(self) -> Iterator[Any]:
        """One epoch of the `loader` given to the constructor, as `for batch
        in loader` gives it; after resume(), the rest of the epoch the
        checkpoint was taken in. Iterate through it (not the loader itself)
        so that checkpoints know where the epoch is."""
        if self.loader is None:
            raise _C.FailedPreconditionError("Resumable.iterate() needs the DataLoader as loader=")
        it, self._resumed_iterator = self._resumed_iterator, None
        if it is None:
            self._epoch_generator_states = [_generator_state(g) for g in self._loader_generators]
            self._epoch_batches = 0
            self._epoch_started = True
            it = iter(self.loader)
        for batch in it:
            self._epoch_batches += 1
            yield batch

    def save(self, step: int, wait: bool = False) -> None:
        """Checkpoints now (unless this step was saved already); with wait,
        returns once it is durable."""
        _check_step(step)
        if self._last_saved_step != step:
            handle = self.checkpointer.save(step, self.state(step))
            self._last_saved_step = step
            if handle.skipped:
                handle.durable.result()  # raises why
            self._pending.append((step, handle.durable))
            if self.checkpointer.replica_root:
                self._replicating.append((step, handle.replicated))
        if wait:
            for s, durable in self._pending:
                if s == step:
                    durable.result()
                    self.last_durable_step = step
        self._reap()

    def step_boundary(self, step: int, loss: Any = None) -> bool:
        """Call once per step, after the optimizer step; `step` counts steps
        done. Commits the sampler's cursor, saves every save_every steps, and
        returns True when a preemption notice says: stop and exit with
        self.exit_code (stint.EXIT_REQUEUE). Distributed: collective (every
        rank stops at the same step, see the module doc). loss: the step's
        training loss (a number or a one-element tensor); under stint-agent
        it goes to stintd with the step, read at most once per heartbeat
        interval (a CUDA tensor is synchronised only then)."""
        _check_step(step)
        self._report_progress(step, loss)
        if self.sampler is not None:
            self.sampler.commit_step()
        self._reap()
        watcher = self.watcher
        if watcher is not None and self._end_clock is not None and not watcher.requested:
            left = self._end_clock.due(**self._cost(step))
            if left is not None:
                watcher.notify("Slurm time limit", max(left, 0.0))
        if watcher is not None and self._stop_agreed(watcher):
            # The exit code is decided: a signal while the process winds down must not kill it.
            watcher.keep_until_exit()
            plan = watcher.plan(**self._cost(step))
            reason = plan.reason
            save = self._all_ranks(plan.save)
            if plan.save and not save:
                reason += "; not saving: the checkpoint does not fit the grace on another rank"
            if save:
                started = time.monotonic()
                notice = watcher.notice()
                noticed = started - (notice.seconds_since_received if notice is not None else 0.0)
                try:
                    self.save(step, wait=True)
                except _C.Error as e:
                    reason += "; emergency checkpoint failed: %s" % e
                else:
                    durable_seconds = time.monotonic() - started
                    # On node-local roots this node's disk may go with it:
                    # the checkpoint counts once a peer holds this node's part.
                    try:
                        self.checkpointer.flush_replication(
                            max(0.0, plan.remaining_seconds - (time.monotonic() - started)))
                        self.notice_to_replicas_seconds = time.monotonic() - noticed
                        self._reap()  # stintd hears where it is before this process exits
                    except _C.Error as e:
                        reason += ("; the emergency checkpoint is durable but not yet on its "
                                   "replicas: %s" % e)
                    if self._progress is not None:  # stintd's figure of this segment
                        self._progress.report_checkpoint(step, durable_seconds,
                                                         self.notice_to_replicas_seconds)
                        # Sent now, before this process exits: where the job
                        # resumes is chosen from what stintd heard.
                        self._progress = None
            else:
                # No time for a new one; let a save in flight finish if it can.
                try:
                    self.checkpointer.flush(max(0.0, plan.remaining_seconds))
                except _C.Error:
                    pass
                self._reap()
            _log.warning("stint: preempted at step %d: %s", step, reason)
            self.last_plan = plan
            self.exit_code = _C.EXIT_REQUEUE
            if self._slurm:
                slurm.record_decision(self.launch, self.checkpointer.root, self.checkpointer.rank,
                                      step, self.last_durable_step)
                slurm.requeue_at_exit(self.launch, self.checkpointer.rank)
            if self.on_preemption is not None:
                self.on_preemption(plan)
            return True
        if self.save_every and step % self.save_every == 0:
            self.save(step)
        return False

    def finish(self, step: int) -> None:
        """Final checkpoint (unless this step is durable already); waits for
        every save. The run is then complete: a preemption signal from now
        until the process exits changes nothing (exit 0)."""
        _check_step(step)
        if self.last_durable_step != step:
            self.save(step, wait=True)
        self.checkpointer.flush()
        self._reap()
        if self.watcher is not None:
            self.watcher.keep_until_exit()
        self.checkpointer.mark_complete(step, dict(self._launch_info(), unix_time=time.time()))
        self._reap()
        self._progress = None  # sends what was reported (where the last step is), stops its thread

    def close(self) -> None:
        """Waits for pending saves, closes the checkpointer, uninstalls the watcher."""
        try:
            self.checkpointer.close()
        finally:
            self._progress = None  # sends what was reported, stops its thread
            if self.watcher is not None:
                self.watcher.uninstall()

    def __enter__(self) -> Resumable:
        return self

    def __exit__(self, *exc: Any) -> Literal[False]:
        self.close()
        return False

    # -- internals ---------------------------------------------------------------------

    def _report_progress(self, step: int, loss: Any) -> None:
        if self._progress is None:
            return
        value = None
        now = time.monotonic()
        # Read (a CUDA tensor: synchronised) once per heartbeat, what stintd samples it at.
        if loss is not None and now - self._loss_reported_at >= self._progress.interval_seconds:
            value = float(loss.item() if isinstance(loss, torch.Tensor) else loss)
            self._loss_reported_at = now
        self._progress.report(step, value)  # a loss is sent once, with its own step

    def _launch_info(self) -> Dict[str, Any]:
        """Who ran this: the launcher, the Slurm job id and restart count (no
        time: two runs of the same job save the same state)."""
        info: Dict[str, Any] = {"launcher": self.launch["launcher"],
                                "world_size": self.launch["world_size"]}
        if self._slurm:
            info.update(slurm_job_id=self.launch["job_id"],
                        slurm_restart_count=self.launch["restart_count"])
        return info

    def _group(self) -> Any:
        """The process group the stop decision is agreed over, or None (one process)."""
        return self.checkpointer.process_group if self.checkpointer.world_size > 1 else None

    def _stop_agreed(self, watcher: PreemptionWatcher) -> bool:
        """Whether to stop at this step: this rank's notice, or in a
        collective run any rank's (one all-reduce per step). A rank without
        a notice of its own gets the earliest rank's deadline as one."""
        requested = watcher.requested
        group = self._group()
        if group is None:
            return requested
        notice = watcher.notice() if requested else None
        # MAX of [has a notice, -seconds to its deadline]: any notice, the earliest deadline.
        flags = torch.tensor([1.0 if requested else 0.0,
                              -notice.seconds_to_deadline if notice is not None else -math.inf],
                             dtype=torch.float64, device=_collective_device(group))
        torch.distributed.all_reduce(flags, op=torch.distributed.ReduceOp.MAX, group=group)
        stop, earliest = flags.tolist()
        if stop and not requested:
            watcher.notify("preemption notice on another rank", -earliest)
        return bool(stop)

    def _all_ranks(self, value: bool) -> bool:
        """`value` when it is True on every rank of the group (False otherwise)."""
        group = self._group()
        if group is None:
            return value
        flag = torch.tensor([1.0 if value else 0.0], dtype=torch.float64,
                            device=_collective_device(group))
        torch.distributed.all_reduce(flag, op=torch.distributed.ReduceOp.MIN, group=group)
        return bool(flag.item())

    def _loader_state(self) -> Dict[str, Any]:
        if not self._epoch_started and not self._warned_loader_unused:
            self._warned_loader_unused = True
            _log.warning("stint: Resumable(loader=...) saves, but no batch was read through "
                         "run.iterate(): a resume restarts the loader's epoch")
        started = self._epoch_started
        return {
            "generators": (self._epoch_generator_states if started else
                           [_generator_state(g) for g in self._loader_generators]),
            "started": started,
            "batches": self._epoch_batches if started else 0,
            "state": self.loader.state_dict() if _is_stateful(self.loader) else None,
            # A stateful loader's own state leaves out the loader's generator
            # (the base seed of each iterator) and where the sampler left it:
            # their states now, for the epochs after the resumed one.
            "generators_now": ([_generator_state(g) for g in self._loader_generators]
                               if _is_stateful(self.loader) else None),
        }

    def _resume_loader(self, saved: Any, where: str) -> None:
        """Puts the loader back where the checkpoint's epoch was: generators,
        then its own state or skipping, with the epoch's iterator made here
        for iterate() to continue."""
        generators = saved.get("generators") if isinstance(saved, dict) else None
        if not isinstance(generators, list) or len(generators) != len(self._loader_generators):
            raise _C.FailedPreconditionError(
                "%s: the checkpoint's loader state holds %s generator states, the loader has %d"
                % (where, len(generators) if isinstance(generators, list) else "no",
                   len(self._loader_generators)))
        for g, state in zip(self._loader_generators, generators):
            g.set_state(torch.frombuffer(bytearray(state), dtype=torch.uint8))
        self._resumed_iterator = None
        self._epoch_started = bool(saved["started"])
        self._epoch_generator_states = list(generators)
        self._epoch_batches = int(saved["batches"])
        if _is_stateful(self.loader):
            self.loader.load_state_dict(saved["state"])
        if not self._epoch_started:
            return
        it = iter(self.loader)
        now = saved.get("generators_now")
        if _is_stateful(self.loader) and isinstance(now, list) and len(now) == len(generators):
            for g, state in zip(self._loader_generators, now):
                g.set_state(torch.frombuffer(bytearray(state), dtype=torch.uint8))
        # A stateful loader or a ResumableSampler starts where it left off;
        # any other loader starts its epoch over: skip what was trained on.
        if not _resumes_itself(self.loader):
            for done in range(self._epoch_batches):
                if next(it, _END) is _END:
                    raise _C.FailedPreconditionError(
                        "%s: the loader's epoch ended after %d batches, the checkpoint's had "
                        "yielded %d: the dataset or the batch size changed"
                        % (where, done, self._epoch_batches))
        self._resumed_iterator = it

    def _reap(self) -> None:
        left = []
        for step, durable in self._pending:
            if not durable.done():
                left.append((step, durable))
                continue
            error = durable.exception(0)  # handed out here: flush() does not raise it again
            if error is not None:
                _log.warning("stint: checkpoint of step %d failed (training goes on): %s",
                             step, error)
            else:
                if self.last_durable_step is None or step > self.last_durable_step:
                    self.last_durable_step = step
                self._report_stored(self.checkpointer.root, 1, step)
        self._pending = left
        left = []
        for step, replicated in self._replicating:
            if not replicated.done():
                left.append((step, replicated))
            elif replicated.exception(0) is None:  # failures are in stats(); tier 1 holds it
                self._report_stored(self.checkpointer.replica_root, 2, step)
        self._replicating = left

    def _report_stored(self, location: str, tier: int, step: int) -> None:
        """Tells stintd where `step` is (rank 0 for the job): it starts and
        moves the job only where its newest step can be read."""
        if self._progress is None or self.checkpointer.rank != 0:
            return
        if "://" not in location:
            location = os.path.abspath(location)
        last = self.checkpointer.stats()["last"]
        size = last["raw_bytes"] * self.checkpointer.world_size if last is not None else 0
        self._progress.report_stored(location, tier, step, size)

    def _cost(self, step: int) -> Dict[str, Any]:
        cost: Dict[str, Any] = {"steps_since_durable": step - (self.last_durable_step or 0)}
        last = self.checkpointer.stats()["last"]
        if last is not None:
            seconds = last["persist_seconds"] + last["commit_seconds"]
            cost["state_bytes"] = last["raw_bytes"]
            if seconds > 0:
                cost["bytes_per_second"] = last["raw_bytes"] / seconds
            cost["fixed_seconds"] = last["snapshot_seconds"] + last["commit_seconds"]
        return cost


_END = object()


def _sharded_like_params(optimizer: torch.optim.Optimizer, saved: Dict[str, Any]) -> Dict[str, Any]:
    """FSDP2: a DTensor's shards come back from a load as one whole tensor,
    so the state of a sharded parameter (momentum, Adam's moments) becomes a
    DTensor sharded like the parameter again: every rank slices its own
    part (distribute_tensor with src_data_rank=None: no communication).
    Anything else is left as it is."""
    try:
        from torch.distributed.tensor import DTensor, distribute_tensor
    except ImportError:  # pragma: no cover
        return saved
    params = [p for group in optimizer.param_groups for p in group["params"]]
    state = saved.get("state", {}) if isinstance(saved, dict) else {}
    for index, p in enumerate(params):
        if not isinstance(p, DTensor) or index not in state:
            continue
        for k, v in state[index].items():
            if isinstance(v, torch.Tensor) and not isinstance(v, DTensor) and v.shape == p.shape:
                state[index][k] = distribute_tensor(v.to(p.device), p.device_mesh, p.placements,
                                                    src_data_rank=None)
    return saved


def _collective_device(group: Any) -> torch.device:
    """Where a tensor for a collective on `group` must live: the current
    CUDA device for NCCL, else the CPU (gloo, and mixed backends)."""
    if str(torch.distributed.get_backend(group)) == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _is_stateful(loader: Any) -> bool:
    """A loader that saves its own position (torchdata's StatefulDataLoader)."""
    return callable(getattr(loader, "state_dict", None)) and \
        callable(getattr(loader, "load_state_dict", None))


def _resumes_itself(loader: Any) -> bool:
    """A loader whose new iterator starts at the checkpoint's position."""
    return _is_stateful(loader) or any(
        isinstance(getattr(loader, name, None), ResumableSampler) for name in ("batch_sampler", "sampler"))


def _generator_state(g: torch.Generator) -> bytes:
    # bytes, not a tensor: per rank in a collective checkpoint, as the global RNGs are.
    return bytes(g.get_state().numpy().tobytes())


def _own_generators(loader: Any) -> List[torch.Generator]:
    """The generators a DataLoader draws from when it makes an iterator
    (its base seed, the sampler's permutation), after giving the loader one
    when it has none (seeded from the global torch RNG, here) and a
    RandomSampler without one the loader's: else both draw from the global
    RNG at every new iterator."""
    if hasattr(loader, "generator") and loader.generator is None:
        g = torch.Generator()
        g.manual_seed(int(torch.empty((), dtype=torch.int64).random_().item()))
        loader.generator = g
    found: List[torch.Generator] = []
    samplers = (getattr(loader, "sampler", None),
                getattr(getattr(loader, "batch_sampler", None), "sampler", None))
    for sampler in samplers:
        if isinstance(sampler, torch.utils.data.RandomSampler) and sampler.generator is None:
            sampler.generator = getattr(loader, "generator", None)
    for owner in (loader,) + samplers:
        g = getattr(owner, "generator", None)
        if isinstance(g, torch.Generator) and all(g is not f for f in found):
            found.append(g)
    return found
