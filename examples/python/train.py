#!/usr/bin/env python3
"""A PyTorch training loop made preemption-safe and exactly resumable with stint.

    PYTHONPATH=build/python_bindings .venv/bin/python examples/python/train.py --ckpt /tmp/run-a

An MLP with dropout classifies noisy Gaussian blobs, trained with AdamW, a
cosine learning-rate schedule and gradient clipping, from a DataLoader with
worker processes. The lines marked "# stint" are all that differs from the
plain loop (5 added, 2 changed; see README.md): kill it with SIGTERM at any point, start it
again with the same --ckpt, and it ends with bit-identical parameters and
optimizer state, having trained on every sample exactly once per epoch.

Exit status: 0 when done, 75 (stint.EXIT_REQUEUE) when preempted after an
emergency checkpoint: run it again.
"""

import argparse
import hashlib
import random
import sys
import time

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

import stint  # stint


class NoisyBlobs(Dataset):
    """Points around `classes` random centers; each sample gets a small
    jitter keyed by its index, so it does not depend on which worker loads it."""

    def __init__(self, n, dim=32, classes=4):
        g = torch.Generator().manual_seed(1234)
        centers = torch.randn(classes, dim, generator=g) * 0.25
        self.labels = torch.randint(0, classes, (n,), generator=g)
        self.x = centers[self.labels] + torch.randn(n, dim, generator=g)

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        jitter = torch.randn(self.x.shape[1], generator=torch.Generator().manual_seed(7919 * i + 1))
        return self.x[i] + 0.05 * jitter, self.labels[i]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ckpt", required=True, help="checkpoint directory")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--step-sleep", type=float, default=0.0,
                   help="seconds to sleep per step, to make interrupting it easy to try")
    p.add_argument("--replica-root", default="",
                   help="tier 2: a shared path or s3://bucket/prefix each checkpoint is copied to "
                        "(a run whose --ckpt is empty resumes from there)")
    p.add_argument("--save-every", type=int, default=100, help="checkpoint every N steps")
    args = p.parse_args()

    torch.manual_seed(0)
    random.seed(0)
    np.random.seed(0)
    data = NoisyBlobs(2000)
    model = nn.Sequential(nn.Linear(32, 128), nn.ReLU(), nn.Dropout(0.1),
                          nn.Linear(128, 128), nn.ReLU(), nn.Dropout(0.1), nn.Linear(128, 4))
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=args.steps, eta_min=1e-4)
    sampler = stint.ResumableSampler(len(data), args.batch, seed=0)  # stint
    loader = DataLoader(data, batch_sampler=sampler, num_workers=args.workers,  # stint: was batch_size, shuffle
                        generator=torch.Generator().manual_seed(0))
    run = stint.Resumable(args.ckpt, model=model, optimizer=opt, sampler=sampler, objects={"sched": sched},  # stint
                          save_every=args.save_every, replica_root=args.replica_root)
    step = run.resume()  # stint: was step = 0
    print("start at step %d" % step, flush=True)

    model.train()
    while step < args.steps:
        for x, y in loader:
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            step += 1
            print("step %d loss %.6f" % (step, loss.item()), flush=True)
            if args.step_sleep:
                time.sleep(args.step_sleep)
            if run.step_boundary(step): sys.exit(stint.EXIT_REQUEUE)  # stint
            if step == args.steps:
                break
    run.finish(step)  # stint
    digest = hashlib.sha256()  # what a resumed run must end with, bit for bit
    for t in list(model.state_dict().values()):
        digest.update(t.numpy().tobytes())
    print("done at step %d params sha256 %s" % (step, digest.hexdigest()), flush=True)


if __name__ == "__main__":
    main()
