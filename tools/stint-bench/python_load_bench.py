#!/usr/bin/env python3
"""The load a Python user times: model + AdamW state back into existing state
dicts, stint against torch.load and dcp.load in the same run, cold cache.

    PYTHONPATH=build/python_bindings .venv/bin/python tools/stint-bench/python_load_bench.py \\
        --dir /nvme/tmp --states dense-480,dense-2048,lora-480,lora-2048 --runs 3 --invocations 3

States (AdamW after one step; {"model": model.state_dict(), "optim":
optimizer.state_dict()}):
  dense-480    10 x Linear(2048, 2048, bias=False): 480 MiB in 40 tensors
               (30 of them 16 MiB, 10 step scalars)
  dense-2048   11 x Linear(4096, 4096, bias=False): 2112 MiB in 44 tensors
  lora-480     256 blocks of a frozen Linear(656, 656) with rank-16 adapters
               A, B (LoRA-like): 482 MiB in 2,304 tensors
  lora-2048    the same with Linear(1408, 1408): 2068 MiB in 2,304 tensors

Methods, each saved once untimed, then loaded --runs times (plus a warm-up),
the order rotated run by run, the page cache dropped before every load (as
root: sync + `echo 3 > /proc/sys/vm/drop_caches` where that file is
writable, else fsync + posix_fadvise(DONTNEED) on every file of the
checkpoint, as python_bench.py's evict(); the header says which):
  stint        stint.Checkpointer.load(into=state): in place
  resume       stint.Resumable.resume() of a model + AdamW (the model in
               place, the optimizer's state new, as after a restart)
  stint.dcp    dcp.load(state, storage_reader=stint.dcp.StorageReader(root))
  torch.load   torch.load(path, weights_only=True): new tensors, the
               reference the issue measured against (no copy into the state)
  torch.load+copy  (only when named in --methods) torch.load, then
               model.load_state_dict() and optimizer.load_state_dict()
  dcp.load     dcp.load(state, checkpoint_id=path): DCP's FileSystemReader,
               in place
Every figure is a median; the ratios are the stint methods' medians over
torch.load's and dcp.load's of the same run. --invocations K runs it all K
times in fresh processes and prints the spread of the ratios over them.
This is a benchmark, not a test: it asserts nothing.
"""

import argparse
import copy
import gc
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import warnings

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from python_bench import _tensors as tensors_of, evict  # noqa: E402  (beside this file)

TARGET_TORCH = 0.9  # a stint load <= 0.9 x torch.load
TARGET_DCP = 0.67   # a stint load <= 0.67 x dcp.load
DEFAULT_METHODS = ("stint", "resume", "stint.dcp", "torch.load", "dcp.load")
STINT_METHODS = ("stint", "resume", "stint.dcp")
REFERENCES = ("torch.load", "dcp.load")


class LoraBlock(torch.nn.Module):
    """A frozen base weight with rank-r adapters, as LoRA fine-tuning holds them."""

    def __init__(self, d, r):
        super().__init__()
        self.base = torch.nn.Linear(d, d, bias=False)
        self.base.weight.requires_grad_(False)
        self.A = torch.nn.Parameter(torch.randn(r, d) * 0.01)
        self.B = torch.nn.Parameter(torch.zeros(d, r))


def build(name):
    """(model, optimizer) of a named state, AdamW after one step."""
    torch.manual_seed(0)
    kind, _, mib = name.partition("-")
    if kind == "dense" and mib in ("480", "2048"):
        width, layers = (2048, 10) if mib == "480" else (4096, 11)
        model = torch.nn.Sequential(*[torch.nn.Linear(width, width, bias=False)
                                      for _ in range(layers)])
    elif kind == "lora" and mib in ("480", "2048"):
        d = 656 if mib == "480" else 1408
        model = torch.nn.Sequential(*[LoraBlock(d, 16) for _ in range(256)])
    else:
        raise SystemExit("unknown state %r (dense-480, dense-2048, lora-480, lora-2048)" % name)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
    for p in model.parameters():
        if p.requires_grad:
            p.grad = torch.randn_like(p) * 1e-3
    opt.step()
    for p in model.parameters():
        p.grad = None
    return model, opt


class Evictor:
    """Drops a checkpoint from the page cache before a load."""

    DROP = "/proc/sys/vm/drop_caches"

    def __init__(self, how):
        if how == "auto":
            how = "drop_caches" if self._drop() else "fadvise"
        self.how = how

    @classmethod
    def _drop(cls):
        try:
            os.sync()
            with open(cls.DROP, "w") as f:
                f.write("3\n")
            return True
        except OSError:
            return False

    def describe(self):
        if self.how == "drop_caches":
            return "sync + echo 3 > /proc/sys/vm/drop_caches before each load"
        return "fsync + posix_fadvise(POSIX_FADV_DONTNEED) on every file before each load"

    def __call__(self, path):
        if self.how == "drop_caches":
            if not self._drop():
                raise SystemExit("cannot write %s any more" % self.DROP)
            return
        evict(path)


class StintLoad:
    name = "stint"

    def __init__(self, base, state, stint, model, opt):
        self.root = os.path.join(base, "stint")
        with stint.Checkpointer(self.root, keep_last=1) as ckpt:
            ckpt.save(1, state).durable.result()
        # A reader, as a job that resumes opens it (no writer lock to take).
        self.ckpt = stint.Checkpointer(self.root, read_only=True)
        self.path = self.root
        self.state = state

    def load(self):
        self.ckpt.load(into=self.state)

    def close(self):
        self.ckpt.close()


class ResumeLoad:
    name = "resume"

    def __init__(self, base, state, stint, model, opt):
        # Its own model and optimizer: resume() replaces the optimizer's state.
        self.model, self.opt = copy.deepcopy((model, opt))
        self.root = os.path.join(base, "resume")
        self.r = stint.Resumable(self.root, model=self.model, optimizer=self.opt,
                                 save_every=0, watch_signals=False, keep_last=1)
        self.r.save(1, wait=True)
        self.r.checkpointer.flush()
        self.path = self.root

    def load(self):
        self.opt.state.clear()  # as after a restart: no optimizer state yet
        self.r.resume()

    def close(self):
        self.r.close()


class StintDcpLoad:
    name = "stint.dcp"

    def __init__(self, base, state, stint, model, opt):
        import stint.dcp
        import torch.distributed.checkpoint as dcp
        self.dcp = dcp
        self.sdcp = stint.dcp
        self.root = os.path.join(base, "stint-dcp")
        dcp.save(state, storage_writer=stint.dcp.StorageWriter(self.root, keep_last=1))
        self.path = self.root
        self.state = state

    def load(self):
        self.dcp.load(self.state, storage_reader=self.sdcp.StorageReader(self.root))

    def close(self):
        pass


class TorchLoad:
    name = "torch.load"

    def __init__(self, base, state, stint, model, opt):
        self.path = os.path.join(base, "torch.pt")
        with open(self.path, "wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())

    def load(self):
        torch.load(self.path, weights_only=True)

    def close(self):
        pass


class TorchLoadCopy(TorchLoad):
    """torch.load, then the copy into the model and optimizer a user makes."""
    name = "torch.load+copy"

    def __init__(self, base, state, stint, model, opt):
        self.model, self.opt = copy.deepcopy((model, opt))
        super().__init__(base, {"model": self.model.state_dict(),
                                "optim": self.opt.state_dict()}, stint, model, opt)

    def load(self):
        sd = torch.load(self.path, weights_only=True)
        self.model.load_state_dict(sd["model"])
        self.opt.load_state_dict(sd["optim"])


class DcpLoad:
    name = "dcp.load"

    def __init__(self, base, state, stint, model, opt):
        import torch.distributed.checkpoint as dcp
        self.dcp = dcp
        self.path = os.path.join(base, "dcp")
        dcp.save(state, checkpoint_id=self.path)
        self.state = state

    def load(self):
        self.dcp.load(self.state, checkpoint_id=self.path)

    def close(self):
        pass


MAKERS = {m.name: m for m in (StintLoad, ResumeLoad, StintDcpLoad, TorchLoad, TorchLoadCopy,
                               DcpLoad)}


def run_state(name, args, evict, stint):
    """{method: [load seconds per run]} for one state."""
    model, opt = build(name)
    state = {"model": model.state_dict(), "optim": opt.state_dict()}
    nbytes = sum(t.numel() * t.element_size() for t in tensors_of(state))
    ntensors = sum(1 for _ in tensors_of(state))
    base = tempfile.mkdtemp(prefix="stint-load-bench-", dir=args.dir)
    methods = []
    try:
        for m in args.methods.split(","):
            methods.append(MAKERS[m.strip()](base, state, stint, model, opt))
        samples = {m.name: [] for m in methods}
        for run in range(args.runs + 1):  # run 0: warm-up, not counted
            # Rotated, not reversed: no method reads its checkpoint twice in
            # a row (a virtual disk's host cache, which the guest's
            # drop_caches does not reach, would favour the second read).
            k = run % len(methods)
            for m in methods[k:] + methods[:k]:
                gc.collect()
                evict(m.path)
                t0 = time.perf_counter()
                m.load()
                t = time.perf_counter() - t0
                if run > 0:
                    samples[m.name].append(t)
    finally:
        for m in methods:
            m.close()
        shutil.rmtree(base, ignore_errors=True)
    return {"state": name, "bytes": nbytes, "tensors": ntensors, "samples": samples}


def ratios(med):
    out = {}
    for who in STINT_METHODS:
        for ref in REFERENCES:
            if who in med and ref in med:
                out["%s/%s" % (who, ref)] = med[who] / med[ref]
    return out


def target_of(key):
    return TARGET_TORCH if key.endswith("torch.load") else TARGET_DCP


def print_state(r):
    med = {m: statistics.median(v) for m, v in r["samples"].items()}
    print("%s: %.0f MiB in %d tensors" % (r["state"], r["bytes"] / 2**20, r["tensors"]))
    print("  %-16s %9s %9s %9s %9s" % ("load", "median s", "min s", "max s", "GB/s"))
    for m, v in r["samples"].items():
        print("  %-16s %9.3f %9.3f %9.3f %9.2f" % (m, med[m], min(v), max(v),
                                                  r["bytes"] / med[m] / 1e9))
    for k, v in ratios(med).items():
        print("  %-24s %6.3f   (target <= %.2f)" % (k, v, target_of(k)))
    return med


def one_invocation(args):
    warnings.filterwarnings("ignore")
    import stint
    evict = Evictor(args.evict)
    print("cold cache: %s; %d runs + 1 warm-up per state, order rotated; torch %s"
          % (evict.describe(), args.runs, torch.__version__), flush=True)
    results = []
    for name in args.states.split(","):
        r = run_state(name.strip(), args, evict, stint)
        r["medians"] = print_state(r)
        results.append(r)
        sys.stdout.flush()
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"evict": evict.how, "runs": args.runs, "results": results}, f, indent=1)
    return results


def many_invocations(args):
    """Runs the benchmark args.invocations times in fresh processes; prints
    each one's figures and their spread."""
    child = list(sys.argv[1:])
    if "--invocations" in child:
        i = child.index("--invocations")
        del child[i:i + 2]
    per = []
    for k in range(args.invocations):
        with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
            out = f.name
        print("== invocation %d of %d" % (k + 1, args.invocations), flush=True)
        subprocess.run([sys.executable, os.path.abspath(__file__)] + child + ["--json", out],
                       check=True)
        with open(out) as f:
            per.append(json.load(f))
        os.unlink(out)
    summarize(per)


def summarize(per):
    """The median over invocations of each one's medians and ratios, [min-max]."""
    print()
    print("== %d invocations (%s): median of the invocations' medians [min-max]"
          % (len(per), per[0]["evict"]))
    for s, name in enumerate(r["state"] for r in per[0]["results"]):
        runs = [p["results"][s] for p in per]
        print("%s: %.0f MiB in %d tensors" % (name, runs[0]["bytes"] / 2**20, runs[0]["tensors"]))
        for m in runs[0]["medians"]:
            v = [r["medians"][m] for r in runs]
            print("  %-16s %7.3f s [%.3f-%.3f]" % (m, statistics.median(v), min(v), max(v)))
        for key in ratios(runs[0]["medians"]):
            v = [ratios(r["medians"])[key] for r in runs]
            print("  %-24s %6.3f [%.3f-%.3f]   (target <= %.2f)"
                  % (key, statistics.median(v), min(v), max(v), target_of(key)))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dir", required=True, help="where to write (a temporary folder inside)")
    p.add_argument("--states", default="dense-480,dense-2048,lora-480,lora-2048",
                   help="comma-separated: dense-480, dense-2048, lora-480, lora-2048")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--methods", default=",".join(DEFAULT_METHODS),
                   help="comma-separated: " + ", ".join(MAKERS))
    p.add_argument("--evict", choices=("auto", "drop_caches", "fadvise"), default="auto")
    p.add_argument("--invocations", type=int, default=1,
                   help="run everything this many times in fresh processes, with the spread")
    p.add_argument("--json", help="write every sample here (one invocation)")
    args = p.parse_args()
    if args.invocations > 1:
        many_invocations(args)
    else:
        one_invocation(args)


if __name__ == "__main__":
    sys.exit(main())
