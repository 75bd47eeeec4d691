"""An Accelerate training loop checkpointed through stint: save_state() every
4 steps returns once the state is staged (write, checksum and commit run in
the background), load_state() resumes from the newest durable step with the
dataloader's position, and SIGTERM makes stint_step_end() save, wait and
exit 75.

    python examples/accelerate/train.py --out /tmp/stint-accelerate
    torchrun --nproc-per-node 2 examples/accelerate/train.py --out ...   # DDP over Gloo
    # kill -TERM <pid>: exits 75; run it again to resume

--record writes one line per step ("step <loss>.hex() <sum of the
parameters>.hex()", the main process); --pause-at N (tests) waits at step N
for the signal.
"""

import argparse
import os
import sys

import torch
from accelerate.utils import DataLoaderConfiguration
from torch.utils.data import DataLoader, TensorDataset

from stint.accelerate import Accelerator


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--steps", type=int, default=24)
    p.add_argument("--save-every", type=int, default=4)
    p.add_argument("--record")
    p.add_argument("--pause-at", type=int)
    a = p.parse_args()

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.GELU(), torch.nn.Dropout(0.1),
                                torch.nn.Linear(64, 4))
    g = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(40, 16, generator=g), torch.randint(0, 4, (40,), generator=g))
    loader = DataLoader(data, batch_size=4, shuffle=True)  # 10 steps per epoch
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=5, gamma=0.7)
    acc = Accelerator(cpu=True, stint_root=os.path.join(a.out, "stint"),
                      dataloader_config=DataLoaderConfiguration(use_stateful_dataloader=True,
                                                                use_seedable_sampler=True))
    model, opt, sched, loader = acc.prepare(model, opt, sched, loader)

    step = 0
    if acc.stint_latest_step() is not None:
        step = acc.load_state()  # the newest durable step, with the data position and RNGs
    while step < a.steps:
        for x, y in loader:
            loss = torch.nn.functional.cross_entropy(model(x), y)
            acc.backward(loss)
            opt.step()
            sched.step()
            opt.zero_grad()
            step += 1
            if a.record and acc.is_main_process:
                total = sum(p.detach().double().sum().item() for p in model.parameters())
                with open(a.record, "a") as f:
                    f.write("%d %s %s\n" % (step, loss.item().hex(), float(total).hex()))
            if step % a.save_every == 0:
                acc.save_state(step=step)
            if a.pause_at == step:
                with open("%s.pid%d" % (a.record, acc.process_index), "w") as f:
                    f.write(str(os.getpid()))
                acc.wait_for_everyone()
                if acc.is_main_process:
                    with open(a.record + ".paused", "w") as f:
                        f.write(str(os.getpid()))
                    acc.stint_watcher.wait(120)  # the test's signal, to the main process
                acc.wait_for_everyone()
            acc.stint_step_end(step)  # a notice: save this step, wait, SystemExit(75)
            if step >= a.steps:
                break
    acc.save_state(step=step, wait=True)
    acc.end_training()
    return 0


if __name__ == "__main__":
    sys.exit(main())
