"""stint for Hugging Face transformers.Trainer: save_steps checkpoints through
stint (asynchronous, atomic, verified), resume_from_checkpoint=True from the
newest durable step, and exit 75 after an emergency checkpoint on a
preemption notice.

    from stint.huggingface import Trainer          # a transformers.Trainer
    trainer = Trainer(model=model, args=args, train_dataset=ds, stint_root="/nvme/ckpt/job-42")
    trainer.train(resume_from_checkpoint=True if resuming else None)
    # a notice (SIGTERM, SIGUSR1): train() saves at the step's end and raises SystemExit(75)

Why a Trainer subclass and not only a TrainerCallback: on_save runs after the
Trainer wrote checkpoint-N/ itself, synchronously, so a callback cannot make
the save asynchronous. The subclass overrides the Trainer's checkpoint
methods (_save_checkpoint, _load_from_checkpoint,
_load_optimizer_and_scheduler, _load_rng_state; private API, tested against
the version pinned in tools/setup.sh). A save hands the model's, the
optimizer's and the LR scheduler's state_dict() and every global RNG to a
stint save of step global_step and returns; once it is durable the
Trainer's checkpoint-N/ folder appears (renamed into place) with
trainer_state.json and a pointer to the step, so get_last_checkpoint() and
save_total_limit work on what is durable. The data position is the
Trainer's own (it skips the batches of the epoch trained on, from its seeded
sampler). The preemption watcher (PreemptionCallback, added by the
subclass) asks for a save and a stop at the next step end; one process, or
every rank receiving the signal (no all-reduce of the decision here).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shutil
from typing import Any, Dict, List, Optional, Tuple

import torch
import transformers
from transformers import TrainerCallback

from . import _C
from .checkpointer import Checkpointer
from .preemption import PreemptionWatcher
from .rng import capture_rng, restore_rng

_log = logging.getLogger("stint")
POINTER_NAME = "stint.json"


class PreemptionCallback(TrainerCallback):
    """On a stint preemption notice: save and stop at the end of this step."""

    def __init__(self, signals: Optional[List[int]] = None, grace: Optional[float] = None) -> None:
        self.signals = signals
        self.grace = grace
        self.watcher: Optional[PreemptionWatcher] = None
        self.stopped_at: Optional[int] = None

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.watcher is None:
            self.watcher = PreemptionWatcher(self.signals, grace=self.grace)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        if self.watcher is not None and self.watcher.requested and self.stopped_at is None:
            self.watcher.keep_until_exit()
            self.stopped_at = state.global_step
            control.should_save = True
            control.should_training_stop = True
        return control

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.watcher is not None and self.stopped_at is None:
            self.watcher.uninstall()
            self.watcher = None


class Trainer(transformers.Trainer):
    """transformers.Trainer checkpointing through stint (see the module doc).
    stint_root: the checkpoint root; stint_options: stint.Checkpointer's
    keyword arguments; preemption: watch SIGTERM/SIGUSR1 (exit 75)."""

    def __init__(self, *args: Any, stint_root: Any, stint_options: Optional[Dict[str, Any]] = None,
                 preemption: bool = True, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.stint_root = os.path.abspath(os.fspath(stint_root))
        self._stint_options = dict(stint_options or {})
        self._stint: Optional[Checkpointer] = None
        self._stint_pending: List[Tuple[int, str, Any, str]] = []  # step, folder, durable, state json
        self._stint_loaded: Optional[Tuple[str, Dict[str, Any]]] = None
        self.preemption: Optional[PreemptionCallback] = None
        if preemption:
            self.preemption = PreemptionCallback()
            self.add_callback(self.preemption)
        self.add_callback(_Poll(self))

    @property
    def stint_checkpointer(self) -> Checkpointer:
        if self._stint is None:
            self._stint = Checkpointer(self.stint_root, collective=False, **self._stint_options)
        return self._stint

    # -- saving -------------------------------------------------------------------

    def _save_checkpoint(self, model: Any, trial: Any) -> None:
        step = self.state.global_step
        folder = os.path.join(self._get_output_dir(trial=trial), "checkpoint-%d" % step)
        if not self.args.should_save:
            return
        state: Dict[str, Any] = {"model": self.accelerator.unwrap_model(self.model).state_dict(),
                                 "rng": capture_rng()}
        if not self.args.save_only_model:
            state["optimizer"] = self.optimizer.state_dict()
            if self.lr_scheduler is not None:
                state["scheduler"] = self.lr_scheduler.state_dict()
        ckpt = self.stint_checkpointer
        if step in ckpt.list_committed() or any(p[0] == step for p in self._stint_pending):
            return
        handle = ckpt.save(step, state)
        if handle.skipped:
            handle.durable.result()
        self.store_flos()
        # As the Trainer's own _save_checkpoint: callbacks' exportable state into the state.
        for cb in self.callback_handler.callbacks + [self.control]:
            if isinstance(cb, transformers.trainer_callback.ExportableState):
                name = cb.__class__.__name__
                if isinstance(self.state.stateful_callbacks.get(name), list):
                    self.state.stateful_callbacks[name].append(cb.state())
                else:
                    self.state.stateful_callbacks[name] = cb.state()
        trainer_state = json.dumps(dataclasses.asdict(self.state), indent=2, sort_keys=True)
        self._stint_pending.append((step, folder, handle.durable, trainer_state))
        self.stint_poll()

    def stint_poll(self, wait: bool = False) -> None:
        """Makes the checkpoint-N/ folders of the saves that are durable (all, with wait)."""
        left = []
        for step, folder, durable, trainer_state in self._stint_pending:
            if not (wait or durable.done()):
                left.append((step, folder, durable, trainer_state))
                continue
            durable.result()
            tmp = folder + ".stint-tmp"
            shutil.rmtree(tmp, ignore_errors=True)
            os.makedirs(tmp)
            with open(os.path.join(tmp, "trainer_state.json"), "w") as f:
                f.write(trainer_state)
            with open(os.path.join(tmp, POINTER_NAME), "w") as f:
                json.dump({"root": self.stint_root, "step": step}, f)
            shutil.rmtree(folder, ignore_errors=True)
            os.replace(tmp, folder)
            if self.args.save_total_limit:
                from transformers.trainer_utils import rotate_checkpoints
                rotate_checkpoints(output_dir=os.path.dirname(folder),
                                   save_total_limit=self.args.save_total_limit,
                                   best_model_checkpoint=self.state.best_model_checkpoint)
        self._stint_pending = left

    # -- loading ------------------------------------------------------------------

    def _stint_state(self, folder: str) -> Dict[str, Any]:
        if self._stint_loaded is None or self._stint_loaded[0] != folder:
            with open(os.path.join(folder, POINTER_NAME)) as f:
                pointer = json.load(f)
            with Checkpointer(pointer["root"], read_only=True, collective=False) as c:
                self._stint_loaded = (folder, c.load(step=int(pointer["step"])))
        return self._stint_loaded[1]

    def _load_from_checkpoint(self, resume_from_checkpoint: str, model: Any = None) -> None:
        if not os.path.isfile(os.path.join(resume_from_checkpoint, POINTER_NAME)):
            return super()._load_from_checkpoint(resume_from_checkpoint, model)
        model = self.model if model is None else model
        model.load_state_dict(self._stint_state(resume_from_checkpoint)["model"])

    def _load_optimizer_and_scheduler(self, checkpoint: Optional[str]) -> None:
        if checkpoint is None or not os.path.isfile(os.path.join(checkpoint, POINTER_NAME)):
            return super()._load_optimizer_and_scheduler(checkpoint)
        s = self._stint_state(checkpoint)
        if "optimizer" in s:
            self.optimizer.load_state_dict(s["optimizer"])
        if "scheduler" in s and self.lr_scheduler is not None:
            self.lr_scheduler.load_state_dict(s["scheduler"])

    def _load_rng_state(self, checkpoint: Optional[str]) -> None:
        if checkpoint is None or not os.path.isfile(os.path.join(checkpoint, POINTER_NAME)):
            return super()._load_rng_state(checkpoint)
        restore_rng(self._stint_state(checkpoint)["rng"])

    # -- the run ------------------------------------------------------------------

    def train(self, *args: Any, **kwargs: Any) -> Any:
        try:
            out = super().train(*args, **kwargs)
        finally:
            if self._stint is not None:
                self.stint_poll(wait=True)
        if self.preemption is not None and self.preemption.stopped_at is not None:
            _log.warning("stint: preempted at step %d: checkpoint durable, exiting %d",
                         self.preemption.stopped_at, _C.EXIT_REQUEUE)
            self.close_stint()
            raise SystemExit(_C.EXIT_REQUEUE)
        return out

    def close_stint(self) -> None:
        if self._stint is not None:
            self.stint_poll(wait=True)
            self._stint.close()
            self._stint = None


class _Poll(TrainerCallback):
    def __init__(self, trainer: Trainer) -> None:
        self.trainer = trainer

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.trainer._stint is not None:
            self.trainer.stint_poll()
