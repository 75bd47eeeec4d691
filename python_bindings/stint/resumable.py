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
`objects` (an LR scheduler, a GradScaler) and `user_state` (plain values).
resume() restores all of it from the newest checkpoint that verifies;
checkpoints that do not verify are reported (logged, and in
resume_skipped) and quarantined.

On a preemption notice (SIGTERM or SIGUSR1 by default), step_boundary()
takes an emergency checkpoint when it fits the remaining grace at the
measured throughput, otherwise logs how many steps will be lost, then
returns True: exit with stint.EXIT_REQUEUE (75) so the scheduler requeues
the job.

With both a model and an optimizer, snapshots are lazy (see
Checkpointer.attach()): the training thread does not wait for the copy. The
tensors in `objects`' state_dict()s must then not be changed in place
before the next optimizer step (LR schedulers and GradScaler hold plain
numbers); pass snapshot="eager" otherwise.

For bit-exact resumes give the DataLoader its own generator
(DataLoader(..., generator=torch.Generator())): creating a DataLoader
iterator otherwise draws from the global torch RNG, and a resumed run
creates its iterator at a different point than an uninterrupted one.

Thread-compatible: the training thread owns it.
"""

from __future__ import annotations

import logging
from typing import (TYPE_CHECKING, Any, Callable, Dict, Iterable, List, Literal, Mapping, Optional,
                    Tuple)

from . import _C
from .checkpointer import Checkpointer
from .preemption import PreemptionWatcher
from .rng import capture_rng, restore_rng

if TYPE_CHECKING:
    import torch

    from .checkpointer import PathLike
    from .sampler import ResumableSampler

_log = logging.getLogger("stint")


class Resumable:
    def __init__(self, root: PathLike, *, model: Optional[torch.nn.Module] = None,
                 optimizer: Optional[torch.optim.Optimizer] = None,
                 sampler: Optional[ResumableSampler] = None, objects: Optional[Mapping[str, Any]] = None,
                 save_every: int = 100, watch_signals: bool = True,
                 signals: Optional[Iterable[int]] = None, grace: Optional[float] = None,
                 safety: Optional[float] = None,
                 on_preemption: Optional[Callable[[_C.PreemptionPlan], Any]] = None,
                 **checkpoint_options: Any) -> None:
        """root: the checkpoint directory. save_every: asynchronous checkpoint
        every N steps (0: only on preemption and finish()). objects: {name:
        object with state_dict()/load_state_dict()}. watch_signals: install a
        PreemptionWatcher (signals, grace, safety as there). on_preemption:
        called with the PreemptionPlan at the step boundary that acts on a
        notice. Other keyword arguments go to stint.Checkpointer (under
        stint-agent its commits are fenced by default: see its fencing=)."""
        self.model = model
        self.optimizer = optimizer
        self.sampler = sampler
        self.objects = dict(objects or {})
        self.save_every = int(save_every)
        self.on_preemption = on_preemption
        self.user_state: Dict[str, Any] = {}
        self.exit_code = 0
        self.last_plan: Optional[_C.PreemptionPlan] = None
        self.resume_skipped: List[str] = []
        self.last_durable_step: Optional[int] = None
        self._last_saved_step: Optional[int] = None
        self._pending: List[Tuple[int, _C.Future]] = []  # (step, durable future)
        self.checkpointer = Checkpointer(root, **checkpoint_options)
        if model is not None and optimizer is not None:
            # Lazy snapshots: a save returns at once and its copies run during
            # the next forward and backward; the hooks wait before the forward
            # (buffers) and the optimizer step (parameters, optimizer state).
            self.checkpointer.attach(model, optimizer)
        self.watcher: Optional[PreemptionWatcher] = None
        if watch_signals:
            try:
                self.watcher = PreemptionWatcher(signals, grace=grace, safety=safety)
            except BaseException:
                self.checkpointer.close()
                raise

    # -- state ------------------------------------------------------------------

    def state(self, step: int) -> Dict[str, Any]:
        """The object a checkpoint of `step` holds."""
        s = {"step": step, "rng": capture_rng(), "user": self.user_state}
        if self.model is not None:
            s["model"] = self.model.state_dict()
        if self.optimizer is not None:
            s["optim"] = self.optimizer.state_dict()
        if self.sampler is not None:
            s["sampler"] = self.sampler.state_dict()
        if self.objects:
            s["objects"] = {name: obj.state_dict() for name, obj in self.objects.items()}
        return s

    def resume(self) -> int:
        """Restores the newest checkpoint that verifies; returns its step, or 0
        when there is none."""
        if not self.checkpointer.list_committed():
            return 0
        into = {"model": self.model.state_dict()} if self.model is not None else None
        # Model tensors are read straight into the parameters; the rest is new.
        r = self.checkpointer.load_result(into=into, strict=False)
        for line in r.skipped:
            _log.warning("stint: resume skipped a damaged checkpoint: %s", line)
        for damaged in r.skipped_steps:
            self.checkpointer.quarantine(damaged)
        self.resume_skipped = list(r.skipped)
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
            obj.load_state_dict(s[key])
        for name, obj in self.objects.items():
            saved = s.get("objects", {})
            if name not in saved:
                raise _C.FailedPreconditionError("%s: the checkpoint holds no state for object '%s'"
                                                 % (r.dir, name))
            obj.load_state_dict(saved[name])
        restore_rng(s["rng"])
        self.user_state = dict(s.get("user") or {})
        step = int(s["step"])
        self.last_durable_step = self._last_saved_step = step
        return step

    # -- the loop -------------------------------------------------------------------

    def save(self, step: int, wait: bool = False) -> None:
        """Checkpoints now (unless this step was saved already); with wait,
        returns once it is durable."""
        if self._last_saved_step != step:
            handle = self.checkpointer.save(step, self.state(step))
            self._last_saved_step = step
            if handle.skipped:
                handle.durable.result()  # raises why
            self._pending.append((step, handle.durable))
        if wait:
            for s, durable in self._pending:
                if s == step:
                    durable.result()
                    self.last_durable_step = step
        self._reap()

    def step_boundary(self, step: int) -> bool:
        """Call once per step, after the optimizer step; `step` counts steps
        done. Commits the sampler's cursor, saves every save_every steps, and
        returns True when a preemption notice says: stop and exit with
        self.exit_code (stint.EXIT_REQUEUE)."""
        if self.sampler is not None:
            self.sampler.commit_step()
        self._reap()
        if self.watcher is not None and self.watcher.requested:
            plan = self.watcher.plan(**self._cost(step))
            reason = plan.reason
            if plan.save:
                try:
                    self.save(step, wait=True)
                except _C.Error as e:
                    reason += "; emergency checkpoint failed: %s" % e
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
            if self.on_preemption is not None:
                self.on_preemption(plan)
            return True
        if self.save_every and step % self.save_every == 0:
            self.save(step)
        return False

    def finish(self, step: int) -> None:
        """Final checkpoint (unless this step is durable already); waits for every save."""
        if self.last_durable_step != step:
            self.save(step, wait=True)
        self.checkpointer.flush()
        self._reap()

    def close(self) -> None:
        """Waits for pending saves, closes the checkpointer, uninstalls the watcher."""
        try:
            self.checkpointer.close()
        finally:
            if self.watcher is not None:
                self.watcher.uninstall()

    def __enter__(self) -> Resumable:
        return self

    def __exit__(self, *exc: Any) -> Literal[False]:
        self.close()
        return False

    # -- internals ---------------------------------------------------------------------

    def _reap(self) -> None:
        left = []
        for step, durable in self._pending:
            if not durable.done():
                left.append((step, durable))
                continue
            if durable.exception(0) is None and (self.last_durable_step is None or
                                                 step > self.last_durable_step):
                self.last_durable_step = step
            # A failure comes back from the next save() or flush().
        self._pending = left

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
