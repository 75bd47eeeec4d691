"""A torchtitan 0.3.0 checkpoint manager on stint: a BaseCheckpointManager
with its own Config, selected by torchtitan's config like its `dcp` and
`torch_checkpointing` managers.

    from stint.torchtitan import CheckpointManager as StintCheckpointManager
    config = Trainer.Config(..., checkpoint=StintCheckpointManager.Config(
        enable=True, folder="checkpoint", interval=500, keep_latest_k=3))
    # the Trainer builds it: config.checkpoint.build(dataloader=, model_parts=,
    # optimizers=, lr_schedulers=, states=, sd_adapter=, base_folder=)

Each save of step N is one stint step under <base_folder>/<folder>: the
states torchtitan hands its managers (ModelWrapper, OptimizersContainer,
LRSchedulersContainer, the dataloader, train_state) go to one
Checkpointer.save() as their state_dict()s, nested by key. save() returns
once the state is copied ("eager", the default; snapshot="lazy" returns
before, and maybe_wait_for_staging() waits for the copies); checksums,
write and the atomic commit run in the background, and save_future is the
step's durable future (maybe_wait_for_saving() waits for it). The last
step's save waits until it is durable; with last_save_model_only it holds
the model only, in export_dtype. keep_latest_k is stint's keep_last.

load(step=-1) loads the newest committed step that verifies (a damaged
one is passed over, and a warning names it), load(step=N) that step; the
model and optimizer state are read into the live state dicts (each DTensor
its own box), then every state's load_state_dict() runs. Step 0, and a
model-only checkpoint, restore the model only; exclude_from_loading is
honoured. In a distributed job (torch.distributed initialised) the
Checkpointer is collective: every rank saves its shards, rank 0 commits.

Not supported (UnimplementedError at construction): initial_load_path /
initial_load_in_hf (loading another format before the first stint step)
and last_save_in_hf.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Any, Dict, Optional

import torch
import torch.nn as nn
from torchtitan.components.checkpointer.base import (
    BaseCheckpointManager,
    DATALOADER,
    LR_SCHEDULER,
    MODEL,
    ModelWrapper,
    OPTIMIZER,
)
from torchtitan.config import TORCH_DTYPE_MAP

from . import _C
from .checkpointer import Checkpointer

_log = logging.getLogger("stint")


class CheckpointManager(BaseCheckpointManager):
    """torchtitan checkpoint manager backed by stint (see the module doc)."""

    @dataclass(kw_only=True, slots=True)
    class Config(BaseCheckpointManager.Config):
        snapshot: str = "eager"
        """stint snapshot mode: "eager" (save() returns once the state is
        copied) or "lazy" (returns before; maybe_wait_for_staging() waits)."""

        keep_every: int = 0
        """Also keep every step divisible by this forever (0: none)."""

        compress: bool = False
        """zstd per chunk."""

        io_engine: str = "auto"
        """"uring", "posix" or "auto"."""

        direct_io: bool = True
        """O_DIRECT writes and reads where the filesystem allows them."""

    def __init__(self, config: Config, *, dataloader: Any, model_parts: list[nn.Module],
                 optimizers: Any, lr_schedulers: Any, states: Dict[str, Any],
                 sd_adapter: Any, base_folder: str = "") -> None:
        self.enable = config.enable
        if not self.enable:
            return
        self.save_future = None
        for name in ("initial_load_path", "initial_load_in_hf", "last_save_in_hf"):
            if getattr(config, name):
                raise _C.UnimplementedError("stint.torchtitan.CheckpointManager: %s is not "
                                            "supported" % name)
        self.config = config
        self.folder = os.path.join(base_folder, config.folder)
        self.states = states
        self.states.update({MODEL: ModelWrapper(model_parts), OPTIMIZER: optimizers,
                            DATALOADER: dataloader, LR_SCHEDULER: lr_schedulers})
        self.export_dtype = TORCH_DTYPE_MAP[config.export_dtype]
        self._ckpt: Optional[Checkpointer] = None

    def __del__(self) -> None:
        self.close()

    @property
    def checkpointer(self) -> Checkpointer:
        if self._ckpt is None:
            c = self.config
            self._ckpt = Checkpointer(self.folder, keep_last=c.keep_latest_k,
                                      keep_every=c.keep_every, compress=c.compress,
                                      snapshot=c.snapshot, io_engine=c.io_engine,
                                      direct_io=c.direct_io)
        return self._ckpt

    def _live(self) -> Dict[str, Any]:
        return {k: v for k, v in self.states.items() if v is not None}

    # -- saving -------------------------------------------------------------------

    def _should_save(self, curr_step: int, last_step: bool) -> bool:
        c = self.config
        if c.load_only:
            return False
        return ((curr_step == 1 and c.enable_first_step_checkpoint) or last_step
                or curr_step % c.interval == 0)

    def _save(self, curr_step: int, last_step: bool = False) -> bool:
        if not self._should_save(curr_step, last_step):
            return False
        if last_step and self.config.last_save_model_only:
            state: Dict[str, Any] = {MODEL: {
                k: v.to(self.export_dtype) if isinstance(v, torch.Tensor)
                and v.is_floating_point() and v.dtype != self.export_dtype else v
                for k, v in self.states[MODEL].state_dict().items()}}
        else:
            state = {k: v.state_dict() for k, v in self._live().items()}
        handle = self.checkpointer.save(curr_step, state)
        if last_step:
            handle.durable.result()
            self.save_future = None
        else:
            self.save_future = handle.durable
        return True

    def _maybe_wait_for_staging(self) -> None:
        if self._ckpt is not None:
            self._ckpt.wait_staged()

    def _wait_for_saving(self) -> None:
        assert self.save_future is not None
        self.save_future.result()
        self.save_future = None

    # -- loading ------------------------------------------------------------------

    @torch.no_grad()
    def _load(self, step: int = -1) -> bool:
        committed = self.checkpointer.list_committed() if os.path.isdir(self.folder) else []
        if not committed:
            if step != -1:
                raise _C.NotFoundError("checkpoint.load_step=%d: %s holds no stint checkpoint"
                                       % (step, self.folder))
            _log.info("stint: no checkpoint in %s, a fresh start", self.folder)
            return False
        live = self._live()
        excluded = set(self.config.exclude_from_loading)
        missing = excluded - set(live)
        if missing:
            raise ValueError("%s not found in state_dict." % sorted(missing))
        into: Dict[str, Any] = {MODEL: live[MODEL].state_dict()}
        if OPTIMIZER in live and OPTIMIZER not in excluded and step != 0:
            into[OPTIMIZER] = live[OPTIMIZER].state_dict()
        result = self.checkpointer.load_result(into=into, step=None if step == -1 else step,
                                               strict=False)
        if result.skipped:
            _log.warning("stint: loaded step %d, passed over %s", result.step, result.skipped)
        saved = result.state
        model_only = result.step == 0 or set(saved) == {MODEL}
        for key, obj in live.items():
            if key in saved and (key == MODEL or not (model_only or key in excluded)):
                obj.load_state_dict(saved[key])
        _log.info("stint: loaded step %d from %s", result.step, result.dir)
        return True

    def _close(self) -> None:
        if getattr(self, "_ckpt", None) is not None:
            self._ckpt.close()
            self._ckpt = None
