"""torchtitan's checkpoint manager protocol on stint, driven the way
torchtitan's Trainer drives it (load() before the loop, save(step,
last_step) after every step) with torchtitan's own OptimizersContainer,
LRSchedulersContainer and ParallelAwareDataloader on a small model, on CPU.
torchtitan's Trainer itself needs an accelerator; this loop is its CPU
stand-in. With torchrun, one process per rank over Gloo (DDP-style
replicas, each with its dp rank of the data).

    python examples/torchtitan/train.py --out /tmp/stint-titan
    torchrun --nproc-per-node 2 examples/torchtitan/train.py --out /tmp/stint-titan
    # kill -9 it; run it again to resume from the newest durable step

--record writes one line per step ("step <loss>.hex() <sum of the
parameters>.hex()", rank 0); --pause-at N (tests) stops at step N until killed.
"""

import argparse
import os
import sys
import time

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.stateful import Stateful
from torchtitan.components.dataloader import ParallelAwareDataloader
from torchtitan.components.optimizer import OptimizersContainer, ParamGroupConfig
from torchtitan.components.optimizer.lr_scheduler import LRSchedulersContainer

from stint.torchtitan import CheckpointManager


class TrainState(Stateful):
    """The loop's own state, as torchtitan's Trainer keeps its step."""

    def __init__(self):
        self.step, self.epoch = 0, 0

    def state_dict(self):
        return {"step": torch.tensor(self.step), "epoch": torch.tensor(self.epoch)}

    def load_state_dict(self, sd):
        self.step, self.epoch = int(sd["step"]), int(sd["epoch"])


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--steps", type=int, default=16)
    p.add_argument("--record")
    p.add_argument("--pause-at", type=int)
    a = p.parse_args()
    world, rank = int(os.environ.get("WORLD_SIZE", "1")), int(os.environ.get("RANK", "0"))
    if world > 1:
        dist.init_process_group("gloo")

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.GELU(), torch.nn.Linear(64, 4))
    optimizers = OptimizersContainer(
        OptimizersContainer.Config(
            param_groups=[ParamGroupConfig(pattern=".*", optimizer_name="AdamW",
                                           optimizer_kwargs={"lr": 1e-2})],
            implementation="for-loop"),
        model_parts=[model])
    schedulers = LRSchedulersContainer(optimizers, lambda step: 0.9 ** step)
    g = torch.Generator().manual_seed(0)
    data = torch.utils.data.TensorDataset(torch.randn(80, 16, generator=g),
                                          torch.randint(0, 4, (80,), generator=g))
    sampler = torch.utils.data.DistributedSampler(data, num_replicas=world, rank=rank, seed=0)
    loader = ParallelAwareDataloader(data, dp_rank=rank, dp_world_size=world, batch_size=4,
                                     sampler=sampler)  # 10 steps per epoch per rank at 2 ranks
    train_state = TrainState()
    manager = CheckpointManager.Config(enable=True, folder="checkpoint", interval=4,
                                       keep_latest_k=3, last_save_model_only=False).build(
        dataloader=loader, model_parts=[model], optimizers=optimizers, lr_schedulers=schedulers,
        states={"train_state": train_state}, sd_adapter=None, base_folder=a.out)

    manager.load(step=-1)  # the newest durable step, or a fresh start
    sampler.set_epoch(train_state.epoch)  # the loader's state holds the position in it
    batches = iter(loader)
    while train_state.step < a.steps:
        try:
            x, y = next(batches)
        except StopIteration:  # the next epoch
            train_state.epoch += 1
            sampler.set_epoch(train_state.epoch)
            batches = iter(loader)
            continue
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        if world > 1:
            for prm in model.parameters():
                dist.all_reduce(prm.grad)
                prm.grad /= world
        optimizers.step()
        schedulers.step()
        optimizers.zero_grad()
        train_state.step += 1
        step = train_state.step
        if a.record and rank == 0:
            total = sum(prm.detach().double().sum().item() for prm in model.parameters())
            with open(a.record, "a") as f:
                f.write("%d %s %s\n" % (step, loss.item().hex(), float(total).hex()))
        manager.save(step, last_step=step == a.steps)
        if a.pause_at == step:
            with open("%s.pid%d" % (a.record, rank), "w") as f:  # torchrun's workers are
                f.write(str(os.getpid()))                        # not in its process group
            if world > 1:
                dist.barrier()
            if rank == 0:
                with open(a.record + ".paused", "w") as f:
                    f.write(str(os.getpid()))
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:  # the test kills it
                time.sleep(0.05)
            return 1
    manager.close()
    if world > 1:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
