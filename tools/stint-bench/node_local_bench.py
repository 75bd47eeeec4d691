#!/usr/bin/env python3
"""Node-local roots and peer replicas (issue 42): two "nodes" on one machine
(STINT_NODE_ID a and b, one rank each, each its own root under --dir, gloo on
CPU), and the references measured in the same run, on the same directory.

    PYTHONPATH=build/python_bindings .venv/bin/python tools/stint-bench/node_local_bench.py \\
        --dir /nvme/tmp --part-mib 1024 --repeat 3
    ... --quick            # 256 MiB per node, 2 runs

Each node saves a part of --part-mib MiB (one float32 tensor's rows), then
its part is copied to the other node (peer_replicas=2: the ring a -> b -> a).

  replication      a node's part copied, verified and committed on its peer
                   (stats()["last_peer_replica"]["replicate_seconds"] on the
                   holder), as GB/s; against the limit measured in the same
                   run: min(the link: the same bytes over one loopback TCP
                   connection, the disk: the same bytes written and fsynced
                   in --dir)
  recovery         node b's root deleted (a lost node), both ranks load:
                   node b's part comes from node a's replica over the file
                   service, page cache of every copy evicted before (fsync +
                   posix_fadvise DONTNEED; no root needed); against reading
                   the same bytes from one file in --dir ("a shared path" on
                   this machine), evicted alike
  stall            the save() call's wall time with peer_replicas=2 against
                   peer_replicas=1 (no copies), same state, saves back to
                   back (each once the previous one is durable) so the
                   previous step's copy runs during the next save(): what
                   replication adds to the training thread

On one machine the "link" is loopback and the "shared path" the same disk,
so the recovery ratio says what the file service costs against a local read,
not what a cluster's network gains over its shared file system.
"""

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import threading
import time

HERE = os.path.abspath(__file__)
NODES = ["a", "b"]


def evict(path):
    """Drops the page cache of `path`, or of every file under it (fsync + DONTNEED)."""
    walked = [(os.path.dirname(path), [], [os.path.basename(path)])] if os.path.isfile(path) \
        else os.walk(path)
    for dirpath, _, files in walked:
        for name in files:
            p = os.path.join(dirpath, name)
            try:
                fd = os.open(p, os.O_RDONLY)
            except OSError:
                continue
            try:
                os.fsync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


# ---- one rank ---------------------------------------------------------------

def rank_main(args):
    import torch
    import torch.distributed as dist

    import stint

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    rows = args.part_mib * (1 << 20) // (4 * 1024)
    part = torch.randn(rows, 1024, generator=torch.Generator().manual_seed(rank))
    out = {"stall": [], "replicate": [], "load": []}
    # Replication: each save's copy alone, flushed before the next save.
    root = os.path.join(args.dir, "r2", NODES[rank])
    ckpt = stint.Checkpointer(root, peer_replicas=2, keep_last=1)
    for i in range(args.repeat + 1):  # the first is a warm-up
        dist.barrier()
        ckpt.save(i, {"w": part}).durable.result(600)
        ckpt.flush_replication(600)
        dist.barrier()  # the holder's copy is committed too
        last = ckpt.stats()["last_peer_replica"]
        if i > 0 and last is not None and last["step"] == i:
            out["replicate"].append((last["bytes"], last["replicate_seconds"]))
    ckpt.close()
    # Stall: saves back to back, each as soon as the previous one is
    # durable, so with peer replicas the previous step's copy runs during
    # the next save() (what a training loop that saves often meets); without
    # them, the same cadence. Blocks alternate, so neither has the page
    # cache or the disk to itself.
    for block in range(2 * args.repeat):
        replicas = 1 + block % 2
        root = os.path.join(args.dir, "stall-r%d" % replicas, NODES[rank])
        ckpt = stint.Checkpointer(root, peer_replicas=replicas, keep_last=1)
        for i in range(3):  # the first has no copy before it to overlap
            dist.barrier()
            t0 = time.monotonic()
            handle = ckpt.save(100 * block + i, {"w": part})
            stall = time.monotonic() - t0
            handle.durable.result(600)
            if i > 0:
                out["stall"].append((replicas, stall))
        ckpt.flush_replication(600)
        ckpt.close()
        dist.barrier()
        shutil.rmtree(root, ignore_errors=True)
    # A lost node: b's root goes; both load, b's part from a's replica.
    root = os.path.join(args.dir, "r2", NODES[rank])
    for i in range(args.repeat):
        dist.barrier()
        if rank == 1:
            shutil.rmtree(root, ignore_errors=True)
        if rank == 0:
            evict(os.path.join(args.dir, "r2"))
        dist.barrier()
        ckpt = stint.Checkpointer(root, keep_last=1)
        into = {"w": torch.empty_like(part)}
        dist.barrier()
        t0 = time.monotonic()
        ckpt.load(into=into)
        out["load"].append(time.monotonic() - t0)
        assert torch.equal(into["w"], part), "rank %d loaded other bytes" % rank
        dist.barrier()
        ckpt.close()
        dist.barrier()
        if rank == 1:
            # Node b again holds nothing: restore its root from the replica for the next round.
            src = os.path.join(args.dir, "r2", "a", ".peer-replicas")
            steps = sorted(d for d in os.listdir(src) if d.startswith("step-"))
            os.makedirs(root, exist_ok=True)
            shutil.copytree(os.path.join(src, steps[-1]), os.path.join(root, steps[-1]))
        dist.barrier()
    with open(os.path.join(args.dir, "rank%d.json" % rank), "w") as f:
        json.dump(out, f)
    dist.barrier()
    os._exit(0)


# ---- references -------------------------------------------------------------

def link_gbps(nbytes):
    """The same bytes over one loopback TCP connection."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    port = srv.getsockname()[1]
    buf = bytearray(8 << 20)

    def receive():
        conn, _ = srv.accept()
        view = memoryview(bytearray(8 << 20))
        left = nbytes
        while left > 0:
            n = conn.recv_into(view, min(len(view), left))
            if n == 0:
                break
            left -= n
        conn.close()

    t = threading.Thread(target=receive)
    t.start()
    c = socket.create_connection(("127.0.0.1", port))
    t0 = time.monotonic()
    left = nbytes
    while left > 0:
        n = min(len(buf), left)
        c.sendall(memoryview(buf)[:n])
        left -= n
    c.close()
    t.join()
    srv.close()
    return nbytes / (time.monotonic() - t0) / 1e9


def disk_write_gbps(path, nbytes):
    buf = os.urandom(8 << 20)
    t0 = time.monotonic()
    with open(path, "wb") as f:
        left = nbytes
        while left > 0:
            f.write(buf[:min(len(buf), left)])
            left -= len(buf)
        f.flush()
        os.fsync(f.fileno())
    return nbytes / (time.monotonic() - t0) / 1e9


def disk_read_seconds(path):
    evict(path)
    t0 = time.monotonic()
    with open(path, "rb", buffering=0) as f:
        buf = bytearray(8 << 20)
        while f.readinto(buf):
            pass
    return time.monotonic() - t0


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--dir", default="/var/tmp")
    p.add_argument("--part-mib", type=int, default=1024)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--rank", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.rank:
        return rank_main(args)
    if args.quick:
        args.part_mib, args.repeat = 256, 2
    work = os.path.join(args.dir, "stint-node-local-bench-%d" % os.getpid())
    os.makedirs(work)
    try:
        nbytes = args.part_mib << 20
        ref = os.path.join(work, "shared-path")
        disk = disk_write_gbps(ref, nbytes)
        link = link_gbps(nbytes)
        shared_read = statistics.median(disk_read_seconds(ref) for _ in range(args.repeat))
        os.remove(ref)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        procs = []
        for rank, node in enumerate(NODES):
            env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                       WORLD_SIZE="2", LOCAL_RANK="0", STINT_NODE_ID=node)
            procs.append(subprocess.Popen(
                [sys.executable, HERE, "--rank", "--dir", work, "--part-mib", str(args.part_mib),
                 "--repeat", str(args.repeat)], env=env))
        codes = [q.wait(timeout=3600) for q in procs]
        if codes != [0, 0]:
            print("a rank failed: exits %s" % codes)
            return 1
        ranks = [json.load(open(os.path.join(work, "rank%d.json" % r))) for r in range(2)]
        copies = [b / s / 1e9 for r in ranks for b, s in r["replicate"]]
        stall = {k: statistics.median(s for r in ranks for rep, s in r["stall"] if rep == k)
                 for k in (1, 2)}
        load = statistics.median(ranks[1]["load"])
        limit = min(link, disk)
        print("node-local roots, 2 nodes x %d MiB, %d runs (medians)" % (args.part_mib, args.repeat))
        print("  replication   %.2f GB/s   limit %.2f GB/s (link %.2f, disk write %.2f)   "
              "ratio %.2f" % (statistics.median(copies), limit, link, disk,
                              statistics.median(copies) / limit))
        print("  recovery      %.3f s (lost node's part from its peer)   shared path read "
              "%.3f s   speedup %.2f" % (load, shared_read, shared_read / load))
        print("  stall         %.4f s with peer replicas, %.4f s without   added %.1f %%" %
              (stall[2], stall[1], 100.0 * (stall[2] - stall[1]) / stall[1]))
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
