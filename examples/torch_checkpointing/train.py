"""A training loop checkpointed with torch_checkpointing's CheckpointManager
on a stint root: its asynchronous saves (a background process) commit each
checkpoint as a stint step (atomic, checksummed), and a restarted run
resumes from the newest durable one.

    python examples/torch_checkpointing/train.py --out /tmp/stint-tc
    # kill -9 it (and its saver process); run it again to resume

--record writes one line per step ("step <loss>.hex() <sum of the
parameters>.hex()"); --pause-at N (tests) stops at step N until killed.
"""

import argparse
import os
import sys
import time

import torch
from torch_checkpointing import CheckpointManager

from stint.torch_checkpointing import StorageConfig, latest_checkpoint


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--steps", type=int, default=16)
    p.add_argument("--save-every", type=int, default=4)
    p.add_argument("--record")
    p.add_argument("--pause-at", type=int)
    a = p.parse_args()

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.GELU(), torch.nn.Dropout(0.1),
                                torch.nn.Linear(64, 4))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    g = torch.Generator().manual_seed(0)
    xs, ys = torch.randn(64, 16, generator=g), torch.randint(0, 4, (64,), generator=g)

    root = os.path.join(a.out, "ckpt")
    manager = CheckpointManager(CheckpointManager.Config(storage_config=StorageConfig(root=root)))
    step = 0
    resume = latest_checkpoint(root)  # "<root>/step-<N>", the newest durable step
    if resume is not None:
        got = manager.load(resume, into={"model": model.state_dict(), "optim": None, "rng": None,
                                         "step": None})
        opt.load_state_dict(got["optim"])
        torch.set_rng_state(got["rng"])
        step = got["step"]
    pending = None
    while step < a.steps:
        rows = torch.arange(step * 4, step * 4 + 4) % len(xs)  # the data position is the step
        loss = torch.nn.functional.cross_entropy(model(xs[rows]), ys[rows])
        loss.backward()
        opt.step()
        opt.zero_grad()
        step += 1
        if a.record:
            total = sum(p.detach().double().sum().item() for p in model.parameters())
            with open(a.record, "a") as f:
                f.write("%d %s %s\n" % (step, loss.item().hex(), float(total).hex()))
        if step % a.save_every == 0 or step == a.steps:
            # Returns once the state is staged; the saver process writes it and
            # stint commits it (the future: durable).
            pending = manager.save(os.path.join(root, "step-%d" % step),
                                   {"model": model.state_dict(), "optim": opt.state_dict(),
                                    "rng": torch.get_rng_state(), "step": step})
        if a.pause_at == step:
            with open(a.record + ".paused", "w") as f:
                f.write(str(os.getpid()))
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:  # the test kills it
                time.sleep(0.05)
            return 1
    if pending is not None:
        pending.result()
    manager.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
