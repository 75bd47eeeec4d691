"""stint for Hugging Face Accelerate: Accelerator.save_state()/load_state()
through stint (asynchronous, atomic, verified), load_state() with no path
from the newest durable step, and exit 75 after an emergency checkpoint on a
preemption notice.

    from stint.accelerate import Accelerator       # an accelerate.Accelerator
    acc = Accelerator(stint_root="/nvme/ckpt/job-42",
                      dataloader_config=DataLoaderConfiguration(use_stateful_dataloader=True))
    model, opt, sched, loader = acc.prepare(model, opt, sched, loader)
    if acc.stint_latest_step() is not None:
        acc.load_state()                            # the newest step that verifies
    for batch in loader:
        ...; opt.step(); sched.step(); opt.zero_grad(); step += 1
        if step % 100 == 0:
            acc.save_state(step=step)               # returns once the state is staged
        acc.stint_step_end(step)                    # a notice: save, wait, SystemExit(75)

Why a subclass and not only the save/load pre-hooks: the pre-hooks run
before Accelerate writes the optimizers, schedulers, samplers and RNG files
itself, synchronously; they can take the models out of its hands but not
the rest. save_state() here hands every prepared model's state_dict(), every
optimizer's and scheduler's, the gradient scaler's, the objects given to
register_for_checkpointing(), every global RNG, Accelerate's step counter and
each prepared dataloader's position to one stint save and returns. The
copies run while training goes on (the model and the optimizer are attached:
the next forward and optimizer step wait for them; stint_options=
{"snapshot": "eager"} copies before returning instead), the write, checksum
and commit in the background. The registered save/load pre-hooks are
called as Accelerate calls them (with output_dir/input_dir the stint root,
or the folder given).

The data position: a dataloader prepared with use_stateful_dataloader=True
(torchdata's StatefulDataLoader) is saved with its state_dict() and its
epoch (DataLoaderShard.iteration), so a load resumes at the first batch not
trained on, in the same order (use_seedable_sampler=True, or the global RNG
that stint restores, orders the epochs). Other dataloaders get their epoch
back only; skip the batches yourself (accelerator.skip_first_batches).

save_state(output_dir) also writes output_dir/stint.json (root, step) once
the step is durable; load_state(folder) loads the step such a folder
points to, and a folder without one as Accelerate does. Steps: save_state
(step=N), or Accelerate's save iteration (0, 1, ...) when step is not given;
the iteration is saved and restored. One process, or every rank with its
own state in a collective Checkpointer (torch.distributed initialised); a
notice on any rank stops every rank at the same step.
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any, Dict, List, Optional, Tuple

import accelerate
import torch

from . import _C
from .checkpointer import Checkpointer
from .preemption import PreemptionWatcher
from .rng import capture_rng, restore_rng

_log = logging.getLogger("stint")
POINTER_NAME = "stint.json"


def _unwrap_optimizer(opt: Any) -> Any:
    """The torch optimizer inside an AcceleratedOptimizer (the step hooks go there)."""
    return getattr(opt, "optimizer", opt)


class Accelerator(accelerate.Accelerator):
    """accelerate.Accelerator whose save_state/load_state go through stint
    (see the module doc). stint_root: the checkpoint root; stint_options:
    stint.Checkpointer's keyword arguments; preemption: watch SIGTERM/SIGUSR1
    (stint_step_end() then saves and exits 75)."""

    def __init__(self, *args: Any, stint_root: Any, stint_options: Optional[Dict[str, Any]] = None,
                 preemption: bool = True, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.stint_root = os.path.abspath(os.fspath(stint_root))
        self._stint_options = dict(stint_options or {})
        self._stint: Optional[Checkpointer] = None
        self._stint_attached: List[int] = []  # id() of the models and optimizers attached
        self._stint_pending: List[Tuple[int, str, Any]] = []  # step, pointer folder, durable
        self.stint_watcher: Optional[PreemptionWatcher] = (
            PreemptionWatcher() if preemption else None)
        self.stint_preempted_at: Optional[int] = None

    @property
    def stint_checkpointer(self) -> Checkpointer:
        if self._stint is None:
            self._stint = Checkpointer(self.stint_root, **self._stint_options)
        return self._stint

    def _stint_attach(self) -> None:
        """Attaches the prepared models and optimizers (lazy snapshots: the
        next forward and optimizer step wait for the copies)."""
        ckpt = self.stint_checkpointer
        if self._stint_options.get("snapshot", "auto") == "eager":
            return
        for model in self._models:
            if id(model) not in self._stint_attached:
                ckpt.attach(model=model)
                self._stint_attached.append(id(model))
        for opt in self._optimizers:
            inner = _unwrap_optimizer(opt)
            if id(inner) not in self._stint_attached:
                ckpt.attach(optimizer=inner)
                self._stint_attached.append(id(inner))

    def prepare_data_loader(self, data_loader: Any, *args: Any, **kwargs: Any) -> Any:
        """Accelerate's, then a loader without a generator is given one:
        else each iterator the loader makes (a new epoch, the resumed one)
        draws its base seed from the global RNG, after the checkpoint that
        restores it: the resumed run would be one draw behind."""
        prepared = super().prepare_data_loader(data_loader, *args, **kwargs)
        base = getattr(prepared, "base_dataloader", prepared)
        if getattr(base, "generator", 1) is None:
            base.generator = torch.Generator().manual_seed(
                int(torch.empty((), dtype=torch.int64).random_().item()))
        return prepared

    # -- saving -------------------------------------------------------------------

    def _stint_state(self) -> Dict[str, Any]:
        weights = [self.get_state_dict(m, unwrap=False) for m in self._models]
        for hook in self._save_model_state_pre_hook.values():
            hook(self._models, weights, self.stint_root)
        loaders = []
        for dl in self._dataloaders:
            entry: Dict[str, Any] = {"iteration": int(getattr(dl, "iteration", 0))}
            if getattr(dl, "use_stateful_dataloader", False):
                entry["state"] = dl.state_dict()
            loaders.append(entry)
        return {
            "models": weights,
            "optimizers": [o.state_dict() for o in self._optimizers],
            "schedulers": [s.state_dict() for s in self._schedulers],
            "dataloaders": loaders,
            "scaler": self.scaler.state_dict() if self.scaler is not None else None,
            "custom": [o.state_dict() for o in self._custom_objects],
            "rng": capture_rng(),
            "accelerate": {"step": int(self.step),
                           "iteration": int(self.project_configuration.iteration)},
        }

    def save_state(self, output_dir: Optional[str] = None, safe_serialization: bool = True,
                   *, step: Optional[int] = None, wait: bool = False, **kwargs: Any) -> str:
        """Saves the state as stint step `step` (default: the save iteration)
        and returns once it is staged (wait=True: once it is durable). An
        output_dir gets a stint.json pointer once the step is durable.
        Returns the directory the step commits to. A step that is committed
        or in flight already is not saved again."""
        if self.distributed_type not in (accelerate.DistributedType.NO,
                                         accelerate.DistributedType.MULTI_CPU,
                                         accelerate.DistributedType.MULTI_GPU):
            raise _C.UnimplementedError("stint.accelerate saves plain and DDP models; %s keeps its "
                                        "own checkpoint format" % self.distributed_type)
        if step is None:
            step = int(self.project_configuration.iteration)
        ckpt = self.stint_checkpointer
        self._stint_attach()
        self.project_configuration.iteration += 1
        if not (step in ckpt.list_committed() or any(p[0] == step for p in self._stint_pending)):
            handle = ckpt.save(step, self._stint_state())
            if handle.skipped:
                handle.durable.result()
            folder = os.path.abspath(os.fspath(output_dir)) if output_dir is not None else ""
            self._stint_pending.append((step, folder, handle.durable))
        self.stint_poll(wait=wait)
        return os.path.join(self.stint_root, "step-%d" % step)

    def stint_poll(self, wait: bool = False) -> None:
        """Raises a failed save's error and writes the pointers of the saves
        that are durable (all, with wait)."""
        left = []
        for step, folder, durable in self._stint_pending:
            if not (wait or durable.done()):
                left.append((step, folder, durable))
                continue
            durable.result()
            if folder and self.is_main_process:
                os.makedirs(folder, exist_ok=True)
                tmp = os.path.join(folder, POINTER_NAME + ".tmp")
                with open(tmp, "w") as f:
                    json.dump({"root": self.stint_root, "step": step}, f)
                os.replace(tmp, os.path.join(folder, POINTER_NAME))
        self._stint_pending = left

    # -- loading ------------------------------------------------------------------

    def stint_latest_step(self) -> Optional[int]:
        """The newest committed step under the root, or None (nothing to resume)."""
        if not os.path.isdir(self.stint_root):
            return None
        if self._stint is not None:
            return self._stint.latest_step()
        with Checkpointer(self.stint_root, read_only=True, collective=False) as c:
            return c.latest_step()

    def load_state(self, input_dir: Optional[str] = None, load_kwargs: Optional[dict] = None,
                   **kwargs: Any) -> int:
        """Loads the newest step that verifies (input_dir None), or the step
        a stint.json in input_dir points to; a folder without one is loaded
        as Accelerate does (returns -1). Returns the step loaded.
        NotFoundError when the root holds no checkpoint."""
        root, step = self.stint_root, None
        if input_dir is not None:
            pointer = os.path.join(os.fspath(input_dir), POINTER_NAME)
            if not os.path.isfile(pointer):
                super().load_state(input_dir, load_kwargs, **kwargs)
                return -1
            with open(pointer) as f:
                p = json.load(f)
            root, step = p["root"], int(p["step"])
        models = list(self._models)
        for hook in self._load_model_state_pre_hook.values():
            hook(models, input_dir if input_dir is not None else root)
        if root == self.stint_root and self._stint is not None:
            result = self._stint.load_result(step=step)
        else:
            with Checkpointer(root, read_only=True, collective=self._stint_collective()) as c:
                result = c.load_result(step=step)
        s = result.state
        for m, sd in zip(models, s["models"]):
            m.load_state_dict(sd)
        for o, sd in zip(self._optimizers, s["optimizers"]):
            o.load_state_dict(sd)
        for sch, sd in zip(self._schedulers, s["schedulers"]):
            sch.load_state_dict(sd)
        for dl, entry in zip(self._dataloaders, s["dataloaders"]):
            if hasattr(dl, "set_epoch"):
                dl.set_epoch(int(entry["iteration"]))
            if "state" in entry and getattr(dl, "use_stateful_dataloader", False):
                dl.load_state_dict(entry["state"])
        if self.scaler is not None and s["scaler"] is not None:
            self.scaler.load_state_dict(s["scaler"])
        if len(s["custom"]) != len(self._custom_objects):
            raise _C.FailedPreconditionError(
                "step %d holds %d registered objects, %d are registered now"
                % (result.step, len(s["custom"]), len(self._custom_objects)))
        for obj, sd in zip(self._custom_objects, s["custom"]):
            obj.load_state_dict(sd)
        restore_rng(s["rng"])
        self.step = int(s["accelerate"]["step"])
        self.project_configuration.iteration = int(s["accelerate"]["iteration"])
        if result.skipped:
            _log.warning("stint: loaded step %d, passed over %s", result.step, result.skipped)
        return result.step

    def _stint_collective(self) -> bool:
        import torch.distributed as dist
        return dist.is_available() and dist.is_initialized()

    # -- preemption and the end ---------------------------------------------------

    def stint_step_end(self, step: int) -> None:
        """The step boundary, after the optimizer and scheduler steps: writes
        the pointers of durable saves and, on a pending preemption notice
        (on any rank: with several, every rank calls this at every step and
        they agree through one all-reduce), saves step `step`, waits until it
        is durable and raises SystemExit(75) (stint.EXIT_REQUEUE). One atomic
        load otherwise, with one process."""
        if self._stint_pending:
            self.stint_poll()
        if self.stint_watcher is None or not self._stint_agree(self.stint_watcher.requested):
            return
        self.stint_watcher.keep_until_exit()
        self.stint_preempted_at = step
        self.save_state(step=step, wait=True)
        _log.warning("stint: preempted at step %d: checkpoint durable, exiting %d",
                     step, _C.EXIT_REQUEUE)
        self.close_stint()
        raise SystemExit(_C.EXIT_REQUEUE)

    def _stint_agree(self, flag: bool) -> bool:
        """True on every rank when any rank has a notice (one all-reduce per
        step with several ranks): the emergency save is collective."""
        if not (self._stint_collective() and self.num_processes > 1):
            return flag
        import torch.distributed as dist
        t = torch.tensor([1.0 if flag else 0.0], dtype=torch.float64)
        if dist.get_backend() == "nccl":
            t = t.to(self.device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return bool(t.item())

    def close_stint(self) -> None:
        """Waits until every save is durable (pointers written), then closes
        the Checkpointer and the watcher. Idempotent."""
        if self._stint is not None:
            self.stint_poll(wait=True)
            self._stint.detach()
            self._stint.close()
            self._stint = None
            self._stint_attached = []
        if self.stint_watcher is not None:
            self.stint_watcher.uninstall()
            self.stint_watcher = None

    def end_training(self) -> None:
        self.close_stint()
        super().end_training()

