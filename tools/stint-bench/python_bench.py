#!/usr/bin/env python3
"""stint from Python against torch.save and torch.distributed.checkpoint
(DCP save and async_save, one process), same run, same state, same directory.

    PYTHONPATH=build/python_bindings .venv/bin/python tools/stint-bench/python_bench.py \\
        --dir /nvme/tmp --params-mib 128 --runs 5

The state is a real model.state_dict() plus the Adam optimizer.state_dict()
after one step: float32 parameters of --params-mib MiB in a few Linear
layers, twice that in exp_avg / exp_avg_sq, and the step scalars (about
3 x --params-mib in all). For each method, one warm-up run, then --runs
measured ones, alternating the methods run by run; each figure is a median.

  stall            wall time of the call on the training thread: until the
                   state may be modified again (stint save(), DCP async_save()
                   return; torch.save and DCP save only when durable)
  time-to-durable  from the call until the checkpoint is on disk (fsync'ed;
                   DCP's FileSystemWriter syncs its files by default)
  load             restoring the state from the checkpoint, page cache
                   evicted first (posix_fadvise DONTNEED); stint and DCP load
                   into the existing tensors, torch.load makes new ones

The stint Checkpointer is opened once and reused, as a training job does
(its staging pool is allocated by the first save, the warm-up). Prints a
table and the ratios the Python API is held to; --json writes every sample.
This is a benchmark, not a test: it asserts nothing. The load alone, into
existing state dicts at several sizes and tensor counts against torch.load
and dcp.load (and resume() and dcp.load through stint's reader), is
python_load_bench.py's.
"""

import argparse
import gc
import json
import os
import shutil
import statistics
import sys
import time
import warnings

import torch


def build_state(params_mib):
    """A model and Adam optimizer whose state dicts total about 3 x params_mib MiB."""
    width = 2048
    rows_total = params_mib * (1 << 20) // 4 // width
    sizes = [rows_total // 2, rows_total // 4, rows_total // 8]
    sizes.append(rows_total - sum(sizes))
    layers = [torch.nn.Linear(width, r, bias=True) for r in sizes if r > 0]
    model = torch.nn.ModuleList(layers)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for p in model.parameters():
        p.grad = torch.randn_like(p) * 1e-3
    opt.step()
    for p in model.parameters():
        p.grad = None
    return {"model": model.state_dict(), "optim": opt.state_dict()}


def state_bytes(state):
    total = 0

    def walk(x):
        nonlocal total
        if isinstance(x, torch.Tensor):
            total += x.numel() * x.element_size()
        elif isinstance(x, dict):
            for v in x.values():
                walk(v)
        elif isinstance(x, (list, tuple)):
            for v in x:
                walk(v)

    walk(state)
    return total


def evict(path):
    """Drops a checkpoint's clean pages from the page cache, so a load reads the disk."""
    files = [path] if os.path.isfile(path) else [
        os.path.join(d, f) for d, _, fs in os.walk(path) for f in fs]
    for f in files:
        try:
            fd = os.open(f, os.O_RDONLY)
        except OSError:
            continue  # removed meanwhile (retention, a lock file)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


class Stint:
    name = "stint async save"

    def __init__(self, base, stint):
        self.stint = stint
        self.root = os.path.join(base, "stint")
        self.ckpt = stint.Checkpointer(self.root, keep_last=1)
        self.step = 0

    def save(self, state):
        self.step += 1
        t0 = time.perf_counter()
        staged, durable = self.ckpt.save(self.step, state)
        t1 = time.perf_counter()
        durable.result()
        t2 = time.perf_counter()
        return t1 - t0, t2 - t0

    def load(self, state):
        self.ckpt.flush()  # retention of older steps runs after durable; let it finish
        evict(os.path.join(self.root, "step-%08d" % self.step))
        t0 = time.perf_counter()
        self.ckpt.load(into=state)
        return time.perf_counter() - t0

    def close(self):
        self.ckpt.close()


class TorchSave:
    name = "torch.save + fsync"

    def __init__(self, base):
        self.path = os.path.join(base, "torch.pt")

    def save(self, state):
        t0 = time.perf_counter()
        with open(self.path, "wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())
        t = time.perf_counter() - t0
        return t, t

    def load(self, state):
        evict(self.path)
        t0 = time.perf_counter()
        torch.load(self.path, weights_only=True)
        return time.perf_counter() - t0

    def close(self):
        pass


class Dcp:
    def __init__(self, base, asynchronous):
        import torch.distributed.checkpoint as dcp
        self.dcp = dcp
        self.asynchronous = asynchronous
        self.name = "DCP async_save" if asynchronous else "DCP save"
        self.base = os.path.join(base, "dcp-async" if asynchronous else "dcp")
        self.n = 0
        self.last = None

    def save(self, state):
        self.n += 1
        path = os.path.join(self.base, "step-%d" % self.n)
        t0 = time.perf_counter()
        if self.asynchronous:
            fut = self.dcp.async_save(state, checkpoint_id=path)
            t1 = time.perf_counter()
            fut.result()
        else:
            self.dcp.save(state, checkpoint_id=path)
            t1 = time.perf_counter()
        t2 = time.perf_counter()
        if self.last is not None:
            shutil.rmtree(self.last, ignore_errors=True)
        self.last = path
        return t1 - t0, t2 - t0

    def load(self, state):
        evict(self.last)
        t0 = time.perf_counter()
        self.dcp.load(state, checkpoint_id=self.last)
        return time.perf_counter() - t0

    def close(self):
        pass


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dir", required=True, help="directory to write in (removed sub-folders only)")
    p.add_argument("--params-mib", type=int, default=128, help="float32 parameters, MiB")
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--methods", default="stint,torch.save,dcp.save,dcp.async_save")
    p.add_argument("--json", help="write every sample here")
    args = p.parse_args()

    warnings.filterwarnings("ignore")
    import stint

    base = os.path.join(os.path.abspath(args.dir), "stint-python-bench-%d" % os.getpid())
    os.makedirs(base)
    torch.manual_seed(0)
    state = build_state(args.params_mib)
    nbytes = state_bytes(state)

    makers = {
        "stint": lambda: Stint(base, stint),
        "torch.save": lambda: TorchSave(base),
        "dcp.save": lambda: Dcp(base, False),
        "dcp.async_save": lambda: Dcp(base, True),
    }
    methods = [makers[m.strip()]() for m in args.methods.split(",")]
    samples = {m.name: {"stall": [], "durable": [], "load": []} for m in methods}
    print("state: %.0f MiB (%d tensors), %d runs + 1 warm-up, in %s, torch %s" % (
        nbytes / 2**20, sum(1 for _ in _tensors(state)), args.runs, base, torch.__version__))
    try:
        for run in range(args.runs + 1):
            order = methods if run % 2 == 0 else list(reversed(methods))
            for m in order:
                gc.collect()
                time.sleep(0.2)
                stall, durable = m.save(state)
                load = m.load(state)
                if run > 0:
                    s = samples[m.name]
                    s["stall"].append(stall)
                    s["durable"].append(durable)
                    s["load"].append(load)
            print("  run %d%s done" % (run, " (warm-up)" if run == 0 else ""), flush=True)
    finally:
        for m in methods:
            m.close()
        shutil.rmtree(base, ignore_errors=True)

    med = {n: {k: statistics.median(v) for k, v in s.items()} for n, s in samples.items()}
    print()
    print("%-20s %12s %16s %12s %14s" % ("median", "stall s", "to-durable s", "load s", "durable GB/s"))
    for n, m in med.items():
        print("%-20s %12.4f %16.3f %12.3f %14.2f" % (n, m["stall"], m["durable"], m["load"],
                                                     nbytes / m["durable"] / 1e9))
    s = med.get(Stint.name)
    a = med.get("DCP async_save")
    if s and a:
        print()
        print("stint stall / DCP async_save stall:             %.3f   (target <= 0.5)" % (s["stall"] / a["stall"]))
        print("stint time-to-durable / DCP async_save's:       %.3f   (target <= %.3f)" % (
            s["durable"] / a["durable"], 1 / 1.5))
        print("stint load / DCP load:                          %.3f   (target <= %.3f)" % (
            s["load"] / a["load"], 1 / 1.5))
    t = med.get(TorchSave.name)
    if s and t:
        print("stint stall / torch.save:                       %.3f" % (s["stall"] / t["stall"]))
        print("stint time-to-durable / torch.save:             %.3f" % (s["durable"] / t["durable"]))
        print("stint load / torch.load:                        %.3f   (target <= 0.5)" % (
            s["load"] / t["load"]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"state_bytes": nbytes, "runs": args.runs, "samples": samples, "medians": med}, f,
                      indent=1)


def _tensors(x):
    if isinstance(x, torch.Tensor):
        yield x
    elif isinstance(x, dict):
        for v in x.values():
            yield from _tensors(v)
    elif isinstance(x, (list, tuple)):
        for v in x:
            yield from _tensors(v)


if __name__ == "__main__":
    sys.exit(main())
