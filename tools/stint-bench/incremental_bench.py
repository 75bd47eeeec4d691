#!/usr/bin/env python3
"""Incremental checkpoints of a LoRA-style fine-tune, against full saves,
same run, same state, same directory.

    PYTHONPATH=build/python_bindings .venv/bin/python tools/stint-bench/incremental_bench.py \\
        --dir /var/tmp --base-mib 1024 --saves 10

The state: a frozen base of --base-mib MiB of float32 Linear weights
(requires_grad False), LoRA adapters (A: d x r, B: r x d per layer) sized to
--trainable-pct of the base, and AdamW's state for the adapters. Between two
checkpoints one training step changes the adapters and their AdamW state
(the base never changes). Three ways to checkpoint it, each --saves times
into its own root, the first save of each a full one:

  full                  stint.Checkpointer(), every save writes everything
  incremental, frozen   incremental=True, save(frozen=<the base>): the base is
                        referenced without being copied or hashed
  incremental, hashed   incremental=True, no frozen=: every chunk is hashed,
                        unchanged ones referenced

For saves 2..N: bytes written (SaveStats.stored_bytes) and time to durable
(from save() until durable), medians; ratios against the full saves of the
same run. This is a benchmark, not a test: it asserts nothing.
"""

import argparse
import os
import shutil
import statistics
import sys
import time

import torch


def build(base_mib, trainable_pct, d=1024, seed=0):
    torch.manual_seed(seed)
    layers = max(1, int(base_mib * 2**20 / 4 / (d * d)))
    base = torch.nn.ModuleList(torch.nn.Linear(d, d, bias=False) for _ in range(layers))
    base.requires_grad_(False)
    # r per layer so that 2 * d * r ~= trainable_pct of d * d.
    r = max(1, int(round(trainable_pct / 100 * d * d / (2 * d))))
    lora = torch.nn.ParameterList()
    for _ in range(layers):
        lora.append(torch.nn.Parameter(torch.randn(d, r) * 0.01))
        lora.append(torch.nn.Parameter(torch.zeros(r, d)))
    opt = torch.optim.AdamW(lora.parameters(), lr=1e-3)
    return base, lora, opt, d


def train_step(base, lora, opt, d, step):
    g = torch.Generator().manual_seed(step)
    x = torch.randn(4, d, generator=g)
    for i, layer in enumerate(base):
        x = torch.tanh(layer(x) + x @ lora[2 * i] @ lora[2 * i + 1])
    x.square().mean().backward()
    opt.step()
    opt.zero_grad()


def state_of(base, lora, opt):
    return {"base": base.state_dict(), "lora": {str(i): p.detach() for i, p in enumerate(lora)},
            "optim": opt.state_dict()}


def run(stint, root, base, lora, opt, d, saves, incremental, frozen):
    samples = []
    with stint.Checkpointer(root, incremental=incremental, keep_last=2) as ck:
        for n in range(saves):
            train_step(base, lora, opt, d, n)
            state = state_of(base, lora, opt)
            t0 = time.perf_counter()
            handle = ck.save(n + 1, state, frozen=(lambda name, t: name.startswith("base."))
                             if frozen else None)
            handle.durable.result(timeout=600)
            durable = time.perf_counter() - t0
            last = ck.stats()["last"]
            samples.append({"durable": durable, "stored": last["stored_bytes"],
                            "raw": last["raw_bytes"], "referenced": last["referenced_bytes"]})
    return samples


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dir", required=True)
    p.add_argument("--base-mib", type=int, default=1024)
    p.add_argument("--trainable-pct", type=float, default=1.0)
    p.add_argument("--saves", type=int, default=10)
    p.add_argument("--dim", type=int, default=1024,
                   help="d of the base's d x d layers: --dim 640 --base-mib 400 is a state of "
                        "2,304 tensors (256 layers, their adapters, AdamW's state)")
    args = p.parse_args()
    import stint

    work = os.path.join(os.path.abspath(args.dir), "stint-incremental-bench-%d" % os.getpid())
    os.makedirs(work)
    base, lora, opt, d = build(args.base_mib, args.trainable_pct, args.dim)
    base_bytes = sum(t.nbytes for t in base.state_dict().values())
    lora_bytes = sum(p.nbytes for p in lora)
    train_step(base, lora, opt, d, -1)  # AdamW's state exists from here on
    tensors = len(stint.pytree.flatten(state_of(base, lora, opt)).tensors)  # as a save lists them
    print("state: base %.0f MiB frozen, adapters %.1f MiB (%.2f%%) + AdamW state, %d tensors, "
          "%d saves each, torch %s, in %s" % (base_bytes / 2**20, lora_bytes / 2**20,
                                              100 * lora_bytes / base_bytes, tensors, args.saves,
                                              torch.__version__, work))
    ways = [("full", False, False), ("incremental, frozen", True, True),
            ("incremental, hashed", True, False)]
    results = {}
    try:
        for name, incremental, frozen in ways:
            root = os.path.join(work, name.replace(", ", "-"))
            t0 = time.perf_counter()
            results[name] = run(stint, root, base, lora, opt, d, args.saves, incremental, frozen)
            shutil.rmtree(root, ignore_errors=True)
            # Deleting GiBs keeps the file system's journal busy for a while:
            # the next way's directory fsyncs must not pay for it.
            os.sync()
            time.sleep(2)
            print("  %s done in %.0f s" % (name, time.perf_counter() - t0), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    med = {}
    print()
    print("%-22s %14s %14s %16s %14s" % ("saves 2..N, median", "written MiB", "referenced MiB",
                                         "to-durable s", "first save s"))
    for name, s in results.items():
        later = s[1:]
        med[name] = {"stored": statistics.median(x["stored"] for x in later),
                     "durable": statistics.median(x["durable"] for x in later),
                     "referenced": statistics.median(x["referenced"] for x in later)}
        print("%-22s %14.1f %14.1f %16.4f %14.3f" % (
            name, med[name]["stored"] / 2**20, med[name]["referenced"] / 2**20,
            med[name]["durable"], s[0]["durable"]))
    full = med["full"]
    print()
    for name, target in (("incremental, frozen", 10), ("incremental, hashed", 4)):
        m = med[name]
        print("%-20s bytes written / full save: %.4f (target <= 0.05); "
              "time to durable: %.1fx shorter (target >= %d)" % (
                  name, m["stored"] / full["stored"], full["durable"] / m["durable"], target))


if __name__ == "__main__":
    sys.exit(main())
