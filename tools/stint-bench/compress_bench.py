#!/usr/bin/env python3
"""compress="auto" against raw and always-zstd, on the disk as it is and on
the same disk throttled, same run, same state.

    PYTHONPATH=build/python_bindings .venv/bin/python tools/stint-bench/compress_bench.py \\
        --dir /var/tmp --size-mib 512 --limit-mib 60

The state: --size-mib MiB of float32 weights drawn N(0, 0.02) and rounded to
bfloat16 (what mixed-precision training keeps in float32 master copies
compresses about 2x). Each way saves --saves times into its own root; the
figure is the logical rate, raw bytes / (save() until durable), median of
saves 2..N (compress="auto" writes its first save raw to measure the disk).

The throttled target is a block-I/O cgroup with a write limit of --limit-mib
MiB/s on the directory's disk (cgroup v2 io.max or v1
blkio.throttle.write_bps_device; needs root): the process moves itself in for
those runs and back out after. Where no such cgroup can be made, the
throttled rows say so and are skipped. This is a benchmark, not a test.
"""

import argparse
import os
import shutil
import statistics
import sys
import time

import torch


def bf16_weights(mib, seed=0):
    g = torch.Generator().manual_seed(seed)
    n = mib * 2**20 // 4 // 1024
    return {"layer%d" % i: (torch.randn(1024, 1024, generator=g) * 0.02).bfloat16().float()
            for i in range(max(1, n // 1024))}


def disk_of(path):
    """'MAJ:MIN' of the whole disk holding `path` (throttles apply to disks)."""
    st = os.stat(path)
    dev = "%d:%d" % (os.major(st.st_dev), os.minor(st.st_dev))
    sys_dev = "/sys/dev/block/" + dev
    if os.path.exists(os.path.join(sys_dev, "partition")):
        with open(os.path.join(os.path.realpath(sys_dev), "..", "dev")) as f:
            dev = f.read().strip()
    return dev


class Throttle:
    """A write-limited block-I/O cgroup this process can enter and leave."""

    def __init__(self, dev, bytes_per_s):
        self.dir = self.parent = None
        v2 = "/sys/fs/cgroup/cgroup.controllers"
        if os.path.exists(v2):
            self.parent = "/sys/fs/cgroup"
            self.dir = os.path.join(self.parent, "stint-compress-bench")
            os.makedirs(self.dir, exist_ok=True)
            with open(os.path.join(self.dir, "io.max"), "w") as f:
                f.write("%s wbps=%d" % (dev, bytes_per_s))
        else:
            self.parent = "/sys/fs/cgroup/blkio"
            self.dir = os.path.join(self.parent, "stint-compress-bench")
            os.makedirs(self.dir, exist_ok=True)
            with open(os.path.join(self.dir, "blkio.throttle.write_bps_device"), "w") as f:
                f.write("%s %d" % (dev, bytes_per_s))

    def _move(self, cgroup):
        with open(os.path.join(cgroup, "cgroup.procs"), "w") as f:
            f.write(str(os.getpid()))

    def __enter__(self):
        self._move(self.dir)

    def __exit__(self, *exc):
        self._move(self.parent)
        return False

    def remove(self):
        try:
            os.rmdir(self.dir)
        except OSError:
            pass


def run(stint, root, state, compress, saves):
    rates, decisions = [], []
    raw = sum(t.nbytes for t in state.values())
    with stint.Checkpointer(root, compress=compress, keep_last=1) as ck:
        for n in range(saves):
            t0 = time.perf_counter()
            ck.save(n + 1, state).durable.result(timeout=600)
            rates.append(raw / (time.perf_counter() - t0))
            last = ck.stats()["last"]
            decisions.append(last.get("compress_decision") or
                             ("zstd" if last.get("compressed") else "raw"))
    shutil.rmtree(root, ignore_errors=True)
    os.sync()
    return statistics.median(rates[1:]), decisions[-1]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dir", required=True)
    p.add_argument("--size-mib", type=int, default=512)
    p.add_argument("--limit-mib", type=int, default=60, help="0: the local disk only")
    p.add_argument("--saves", type=int, default=5)
    args = p.parse_args()
    import stint

    work = os.path.join(os.path.abspath(args.dir), "stint-compress-bench-%d" % os.getpid())
    os.makedirs(work)
    state = bf16_weights(args.size_mib)
    print("state: %d MiB of bf16-valued float32, %d saves per way, torch %s, in %s" % (
        sum(t.nbytes for t in state.values()) >> 20, args.saves, torch.__version__, work))
    targets = [("local disk", None)]
    throttle = None
    try:
        if args.limit_mib > 0:
            throttle = Throttle(disk_of(work), args.limit_mib * 2**20)
            targets.append(("throttled to %d MiB/s (cgroup)" % args.limit_mib, throttle))
    except OSError as e:
        print("no throttled target: cannot make a block-I/O cgroup here (%s)" % e)
    rows = []
    try:
        for label, th in targets:
            for compress in (False, True, "auto"):
                root = os.path.join(work, "c-%s" % compress)
                if th is None:
                    rate, why = run(stint, root, state, compress, args.saves)
                else:
                    with th:
                        rate, why = run(stint, root, state, compress, args.saves)
                rows.append((label, compress, rate, why))
                print("  %s, compress=%r: %.0f MiB/s" % (label, compress, rate / 2**20), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if throttle is not None:
            throttle.remove()

    print()
    print("%-34s %-8s %14s  %s" % ("target", "compress", "logical MiB/s", "last decision (auto)"))
    for label, compress, rate, why in rows:
        print("%-34s %-8s %14.0f  %s" % (label, compress, rate / 2**20,
                                         why if compress == "auto" else ""))
    by = {(label, c): rate for label, c, rate, _ in rows}
    for label, _ in targets:
        raw, z, auto = by[(label, False)], by[(label, True)], by[(label, "auto")]
        print("%s: zstd / raw %.2f; auto / raw %.2f (target on the local disk: >= 0.95; "
              "throttled: zstd > raw and auto follows it)" % (label, z / raw, auto / raw))


if __name__ == "__main__":
    sys.exit(main())
