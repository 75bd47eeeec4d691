#!/usr/bin/env python3
"""Reference for stint-bench: how long a synchronous torch.save of a state
dict blocks the training thread.

Builds a state_dict of float32 tensors (bf16-rounded N(0, 0.02) values, like
mixed-precision weights kept in float32) totalling --size bytes, then times
torch.save to a file in --dir, once followed by flush + os.fsync (the state is
durable when the call returns, which is what a checkpoint promises) and once
without (the data may still sit in the page cache). Prints one JSON object
with every sample and the medians. Removes the files it writes.

  torch_save_ref.py --size BYTES --dir DIR --runs N [--shapes 3072x1024,3072,...]

--shapes lets stint-bench pass its own tensor layout so both sides save the
same tensors; without it the size is split into 16 tensors of varying sizes.
"""

import argparse
import json
import os
import statistics
import sys
import time


def parse_shapes(text):
    shapes = []
    for item in text.split(","):
        item = item.strip()
        if item:
            shapes.append([int(d) for d in item.split("x")])
    return shapes


def default_shapes(size_bytes, count=16):
    # Varying sizes (weights 1..count parts) so the split looks like a model's
    # mix of big matrices and smaller ones; rows of 1024 floats.
    total = size_bytes // 4
    weights = list(range(1, count + 1))
    unit = total // sum(weights)
    shapes = []
    used = 0
    for i, w in enumerate(weights):
        n = unit * w if i < count - 1 else total - used
        used += n
        if n >= 1024 and n % 1024 == 0:
            shapes.append([n // 1024, 1024])
        else:
            shapes.append([n])
    return shapes


def numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def build_state(torch, shapes, seed):
    gen = torch.Generator().manual_seed(seed)
    state = {}
    for i, shape in enumerate(shapes):
        t = torch.randn(*shape, generator=gen, dtype=torch.float32) * 0.02
        state["t%02d" % i] = t.to(torch.bfloat16).to(torch.float32)
    return state


def time_save(torch, state, path, fsync):
    t0 = time.perf_counter()
    with open(path, "wb") as f:
        torch.save(state, f)
        if fsync:
            f.flush()
            os.fsync(f.fileno())
    return time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, required=True, help="state size in bytes")
    ap.add_argument("--dir", required=True, help="directory to write into")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--shapes", default="", help="comma-separated shapes, dims joined by x")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()

    try:
        import torch
    except Exception as e:  # reported, not raised: stint-bench prints the reason
        print(json.dumps({"error": "import torch failed: %s" % e}))
        return 2

    shapes = parse_shapes(args.shapes) if args.shapes else default_shapes(args.size)
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    t0 = time.perf_counter()
    state = build_state(torch, shapes, args.seed)
    build_s = time.perf_counter() - t0
    state_bytes = sum(t.numel() * t.element_size() for t in state.values())

    path = os.path.join(args.dir, "torch_save_ref-%d.pt" % os.getpid())
    fsync_s, nofsync_s = [], []
    file_bytes = 0
    try:
        # One untimed save first: the first call pays for lazy imports and
        # first-touch allocations that a training loop pays only once.
        time_save(torch, state, path, fsync=True)
        os.remove(path)
        os.sync()
        for _ in range(max(1, args.runs)):
            # Unfsynced data of one sample must not be written back during the
            # next: sync outside the timed region, then remove the file.
            nofsync_s.append(time_save(torch, state, path, fsync=False))
            os.sync()
            os.remove(path)
            fsync_s.append(time_save(torch, state, path, fsync=True))
            file_bytes = os.path.getsize(path)
            os.remove(path)
            os.sync()
    finally:
        if os.path.exists(path):
            os.remove(path)

    print(json.dumps({
        "torch_version": torch.__version__,
        "python": sys.version.split()[0],
        "state_bytes": state_bytes,
        "file_bytes": file_bytes,
        "tensors": len(state),
        "runs": len(fsync_s),
        "build_seconds": build_s,
        "save_fsync_seconds": fsync_s,
        "save_nofsync_seconds": nofsync_s,
        "save_fsync_median_seconds": statistics.median(fsync_s),
        "save_nofsync_median_seconds": statistics.median(nofsync_s),
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
