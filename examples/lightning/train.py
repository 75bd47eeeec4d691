"""A Lightning run checkpointed through stint: asynchronous, atomic, verified
saves, exit 75 with an emergency checkpoint on a preemption notice, and an
exact resume (data position, RNG) with ckpt_path="last".

    python examples/lightning/train.py --root /tmp/stint-pl --steps 40
    # kill -TERM <pid> mid-run: it exits 75; run the same command again to resume

--devices 2 runs DDP over Gloo on the CPU. --log writes one line per step
("step loss.hex()") from rank 0; --final writes the final parameters.
--pause-at N (tests): at step N, rank 0 writes <log>.paused and waits for
the notice, so a test's signal lands in the middle of an epoch.
"""

import argparse
import os
import sys
import time

import torch
from torch.utils.data import DataLoader, TensorDataset

import lightning as L
from lightning.pytorch.callbacks import ModelCheckpoint

import stint.lightning as sl


class Model(L.LightningModule):
    def __init__(self, log=None, pause_at=None):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(),
                                       torch.nn.Dropout(0.2), torch.nn.Linear(32, 1))
        self.log_path = log
        self.pause_at = pause_at

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.net(x), y)
        if self.trainer.is_global_zero and self.log_path:
            with open(self.log_path, "a") as f:  # the step this batch completes
                f.write("%d %s\n" % (self.trainer.global_step + 1, float(loss).hex()))
        return loss

    def on_train_batch_end(self, outputs, batch, batch_idx):
        step = self.trainer.global_step
        if self.pause_at is not None and step == self.pause_at and self.trainer.is_global_zero:
            stint_cb = next(c for c in self.trainer.callbacks if isinstance(c, sl.Callback))
            with open(self.log_path + ".paused", "w") as f:
                f.write(str(os.getpid()))
            # The test's signal arrives now: wait for it (bounded), then go on to the
            # step boundary, where the callback stops the run.
            if stint_cb.watcher is not None:
                stint_cb.watcher.wait(120)
            else:  # the signal is Lightning's: its handler saves hpc_ckpt_1.ckpt
                deadline = time.monotonic() + 120
                hpc = os.path.join(self.trainer.default_root_dir, "hpc_ckpt_1.ckpt")
                while not os.path.exists(hpc) and time.monotonic() < deadline:
                    time.sleep(0.01)

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-2)

    def train_dataloader(self):
        g = torch.Generator().manual_seed(0)
        x = torch.randn(96, 16, generator=g)
        y = x.sum(dim=1, keepdim=True) + 0.1 * torch.randn(96, 1, generator=g)
        sampler = sl.ResumableSampler(len(x), global_batch=8, seed=1,
                                      rank=self.trainer.global_rank,
                                      world_size=self.trainer.world_size)
        return DataLoader(TensorDataset(x, y), batch_sampler=sampler)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--root", required=True)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--every", type=int, default=4)
    p.add_argument("--devices", type=int, default=1)
    p.add_argument("--strategy", default="auto")
    p.add_argument("--log")
    p.add_argument("--final")
    p.add_argument("--pause-at", type=int)
    p.add_argument("--no-preemption", action="store_true",
                   help="leave the signals to Lightning (SLURMEnvironment's requeue)")
    a = p.parse_args()
    L.seed_everything(0, verbose=False)
    io = sl.CheckpointIO(os.path.join(a.root, "stint"), keep_last=3)
    trainer = L.Trainer(
        accelerator="cpu", devices=a.devices, strategy=a.strategy, max_steps=a.steps,
        plugins=[io], use_distributed_sampler=False, logger=False, enable_progress_bar=False,
        enable_model_summary=False, num_sanity_val_steps=0, default_root_dir=a.root,
        callbacks=[sl.Callback(preemption=not a.no_preemption),
                   ModelCheckpoint(dirpath=os.path.join(a.root, "links"),
                                   every_n_train_steps=a.every, save_last=True, save_top_k=-1)])
    model = Model(a.log, a.pause_at)
    trainer.fit(model, ckpt_path=None if a.no_preemption else "last")
    if trainer.is_global_zero and a.final:
        torch.save({k: v.clone() for k, v in model.state_dict().items()}, a.final)
    return 0


if __name__ == "__main__":
    sys.exit(main())
