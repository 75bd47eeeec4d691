#!/usr/bin/env python3
"""stint's multi-rank save against torch.distributed.checkpoint and fio, N
processes on one machine (gloo on CPU, or NCCL with one GPU per rank), same
run, same state, same directory.

    PYTHONPATH=build/python_bindings .venv/bin/python tools/stint-bench/sharded_bench.py \\
        --dir /nvme/tmp --worlds 2,4 --total-mib 1024 --repeat 3
    ... --quick            # 256 MiB, a smoke run
    ... --device cuda      # rank r's shard on GPU r (N GPUs; exit 77 with fewer)

The state: four float32 tensors of --total-mib MiB together (1/2, 1/4, 1/8,
1/8 of it, 2048 columns), each split by rows over the N ranks (Shard(0) on a
1-D mesh). Each rank builds only its own rows. stint gets the local rows and
their boxes, (global_shape, offsets); DCP gets the same rows as DTensors
(DTensor.from_local on a 1-D "cpu" mesh), so it plans the shards itself and
can reshard on load. Every rank runs in its own process, joined over a
FileStore; stint's commit channel is a PrefixStore over that group's store.

For each world size N: fio first, then one job of N processes that saves with
every method (one warm-up run, then --repeat measured ones, alternating the
method order run by run, a barrier around every save), then one job of M
processes (--load-world, default N // 2, at least 1) that loads the last
checkpoint of stint and of DCP save into the boxes / DTensors of M ranks.

  stall            per rank, the wall time of the call on the training
                   thread: stint save() until its staged future (at once on
                   CPU; the device-to-host copies on a GPU), DCP
                   async_save() (its stager copies before returning), DCP
                   save() (returns when durable). Median over ranks and runs.
  time-to-durable  per run, from the first rank's call to the last rank's
                   durable (stint: handle.durable.result() on every rank,
                   which resolves when the whole save is committed; DCP: the
                   save future, which resolves after rank 0 wrote .metadata;
                   both fsync their files). Median over runs.
  persist GB/s     state bytes / time-to-durable: the aggregate throughput
                   from the first call to the commit, compared with fio.
  load             per run, from the first rank's call to the last rank's
                   return, at world size M; before every load rank 0 evicts
                   both checkpoints' pages (fsync + posix_fadvise DONTNEED, as
                   python_bench.py does; no root, so no drop_caches). stint
                   reads with O_DIRECT besides.
  fio              numjobs=N, sequential 4 MiB writes, O_DIRECT, io_uring
                   (libaio if that fails), iodepth 16, end_fsync, the same
                   total bytes in the same directory; new files
                   (fallocate=none) and preallocated ones, the better one is
                   the reference. The load's reference: fio writes the same
                   bytes as numjobs=M files, then reads them back with
                   numjobs=M (M readers at once, as the load has).

DCP modes: save; async_save (THREAD, its default stager); async_save with
AsyncCheckpointerType.PROCESS and a DefaultStager(StagingOptions(pinned,
shared memory, synchronous staging)) kept across saves. Pinned memory needs
CUDA: on a CPU-only torch the stager warns and ignores it (the script says
so); shared memory is used. A mode that fails is skipped with its reason.
This is a benchmark, not a test: it asserts nothing (it prints whether each
load gave the saved values back: the sums of every shard, save vs load).
"""

import argparse
import datetime
import gc
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from python_bench import evict  # noqa: E402  (the same cold-read preparation)
WIDTH = 2048  # float32 columns of every tensor
FRACTIONS = (2, 4, 8, 8)  # tensor i holds 1/FRACTIONS[i] of the state
JOB_DEADLINE = 1800.0  # seconds for one job of N processes
DCP_MODES = ("dcp.save", "dcp.async_save", "dcp.async_save process")


# -- the state ----------------------------------------------------------------------


def layout(total_mib, world):
    """[(name, global_rows)]: rows a multiple of 8 x world, so the N saving ranks get equal rows."""
    rows_total = total_mib * (1 << 20) // 4 // WIDTH
    unit = 8 * world
    out = []
    for i, f in enumerate(FRACTIONS):
        rows = max(unit, rows_total // f // unit * unit)
        out.append(("layer%d.weight" % i, rows))
    return out


def rows_of(global_rows, rank, world):
    """(offset, rows) of `rank`'s share as Shard(0) cuts it (torch.chunk: ceil, last one short)."""
    share = -(-global_rows // world)
    off = min(rank * share, global_rows)
    return off, min(share, global_rows - off)


# -- the rank side ------------------------------------------------------------------


class Rank:
    """One process of a job: its group, mesh and shard of the state."""

    def __init__(self, cfg, rank, world):
        import torch
        import torch.distributed as dist
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor import DTensor, Shard
        self.torch, self.dist = torch, dist
        self.cfg, self.rank, self.world = cfg, rank, world
        self.device = cfg.get("device", "cpu")
        if self.device == "cuda":
            torch.cuda.set_device(rank)
        dist.init_process_group("nccl" if self.device == "cuda" else "gloo",
                                init_method="file://" + cfg["store"] + "-%d" % world,
                                rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=900))
        self.mesh = init_device_mesh(self.device, (world,))
        self.names, self.locals, self.boxes, self.dtensors = [], [], [], {}
        g = torch.Generator().manual_seed(1000 + rank)
        for name, rows in layout(cfg["total_mib"], cfg["save_world"]):
            off, n = rows_of(rows, rank, world)
            if cfg["role"] == "save":
                t = torch.randn(n, WIDTH, generator=g).to(self.device)
            else:
                t = torch.zeros(n, WIDTH, device=self.device)
            self.names.append(name)
            self.locals.append(t)
            self.boxes.append(([rows, WIDTH], [off, 0]))
            self.dtensors[name] = DTensor.from_local(t, self.mesh, [Shard(0)], run_check=False,
                                                     shape=torch.Size([rows, WIDTH]),
                                                     stride=(WIDTH, 1))

    def barrier(self):
        self.dist.barrier()

    def store(self):
        return self.dist.PrefixStore("stint-bench", self.dist.distributed_c10d._get_default_store())

    def sums(self):
        return [float(t.double().sum()) for t in self.locals]


class StintSave:
    name = "stint"

    def __init__(self, r):
        from stint import _C
        self.r = r
        self.root = os.path.join(r.cfg["base"], "stint")
        self.ckpt = _C.Checkpointer(self.root, rank=r.rank, world_size=r.world,
                                    store=r.store() if r.world > 1 else None, keep_last=1,
                                    commit_timeout=600.0, cuda=r.device == "cuda")
        self.step = 0

    def save(self):
        self.step += 1
        t0 = time.monotonic()
        h = self.ckpt.save(self.step, self.r.names, self.r.locals, {}, self.r.boxes)
        # The stall ends when the tensors may change again: at once on CPU,
        # when the device-to-host copies are done on a GPU.
        h.staged.result(600.0)
        t1 = time.monotonic()
        h.durable.result(600.0)
        t2 = time.monotonic()
        last = self.ckpt.stats().get("last") or {}
        self.phases = [last.get(k, float("nan")) for k in
                       ("snapshot_seconds", "persist_seconds", "commit_seconds")]
        return t0, t1, t2

    def after(self):
        pass

    def close(self):
        self.ckpt.flush()  # retention of the older step runs after durable
        self.ckpt.close()
        return {"stint": self.root}


class DcpSave:
    def __init__(self, r, name):
        import torch.distributed.checkpoint as dcp
        self.r, self.dcp, self.name = r, dcp, name
        self.base = os.path.join(r.cfg["base"], name.replace(" ", "-"))
        self.n = 0
        self.last = self.prev = None
        self.stager = None
        if name == "dcp.async_save process":
            from torch.distributed.checkpoint.staging import DefaultStager, StagingOptions
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                self.stager = DefaultStager(StagingOptions(
                    use_pinned_memory=True, use_shared_memory=True, use_async_staging=False,
                    use_non_blocking_copy=False))
            self.notes = ["%s" % w.message for w in caught if "pin" in str(w.message)]

    def save(self):
        self.n += 1
        path = os.path.join(self.base, "step-%d" % self.n)
        t0 = time.monotonic()
        if self.name == "dcp.save":
            self.dcp.save(self.r.dtensors, checkpoint_id=path)
            t1 = time.monotonic()
        elif self.name == "dcp.async_save":
            fut = self.dcp.async_save(self.r.dtensors, checkpoint_id=path)
            t1 = time.monotonic()
            fut.result()
        else:
            from torch.distributed.checkpoint.state_dict_saver import AsyncCheckpointerType
            fut = self.dcp.async_save(self.r.dtensors, checkpoint_id=path,
                                      async_checkpointer_type=AsyncCheckpointerType.PROCESS,
                                      async_stager=self.stager)
            t1 = time.monotonic()
            fut = getattr(fut, "upload_completion", fut)
            fut.result()
        t2 = time.monotonic()
        self.prev, self.last = self.last, path
        return t0, t1, t2

    def after(self):
        """After the barrier that follows a save: rank 0 removes the older step."""
        if self.r.rank == 0 and self.prev is not None:
            shutil.rmtree(self.prev, ignore_errors=True)
        self.prev = None

    def close(self):
        if self.stager is not None:
            self.stager.close()
        return {self.name: self.last}


def save_job(r):
    cfg = r.cfg
    samples, skipped, notes = {}, {}, {}
    phases = []  # stint's own (snapshot, persist, commit) seconds of each measured save
    methods = []
    for name in cfg["methods"]:
        try:
            m = StintSave(r) if name == "stint" else DcpSave(r, name)
        except Exception as e:  # noqa: BLE001 - a mode this torch lacks is skipped, with why
            skipped[name] = "%s: %s" % (type(e).__name__, e)
            continue
        notes[name] = getattr(m, "notes", [])
        methods.append(m)
        samples[m.name] = []
    for run in range(cfg["repeat"] + 1):
        order = methods if run % 2 == 0 else list(reversed(methods))
        for m in list(order):
            if m.name in skipped:
                continue
            gc.collect()
            r.barrier()
            try:
                t = m.save()
                err = None
            except Exception as e:  # noqa: BLE001
                t, err = None, "%s: %s" % (type(e).__name__, e)
            # Every rank must agree to skip, or the next barrier pairs with a collective.
            flags = [None] * r.world
            r.dist.all_gather_object(flags, err)
            bad = [f for f in flags if f]
            if bad:
                skipped[m.name] = bad[0]
                continue
            r.barrier()
            m.after()
            if run > 0:
                samples[m.name].append(t)
                if hasattr(m, "phases"):
                    phases.append(m.phases)
        if r.rank == 0:
            print("  N=%d run %d%s done" % (r.world, run, " (warm-up)" if run == 0 else ""),
                  flush=True)
    paths = {}
    for m in methods:
        if m.name not in skipped:
            paths.update(m.close())
    return {"samples": samples, "skipped": skipped, "notes": notes, "paths": paths,
            "sums": r.sums(), "phases": phases}


def load_job(r):
    cfg = r.cfg
    paths = cfg["paths"]
    samples, sums, skipped = {}, {}, {}
    ckpt = None
    if "stint" in paths:
        from stint import _C
        ckpt = _C.Checkpointer(paths["stint"], rank=r.rank, world_size=r.world,
                               store=r.store() if r.world > 1 else None, keep_last=1000,
                               commit_timeout=600.0, cuda=r.device == "cuda")
    dcp_path = paths.get("dcp.save") or next(
        (paths[m] for m in DCP_MODES if m in paths), None)
    methods = []
    if ckpt is not None:
        methods.append("stint")
    if dcp_path is not None:
        methods.append("dcp.load")

    def planner(reader):
        return ([(n, t, b[0], b[1]) for n, t, b in zip(r.names, r.locals, r.boxes)], [])

    for run in range(cfg["repeat"] + 1):
        order = methods if run % 2 == 0 else list(reversed(methods))
        for name in order:
            if name in skipped:
                continue
            for t in r.locals:
                t.zero_()
            gc.collect()
            if r.rank == 0:
                for p in paths.values():
                    evict(p)
            r.barrier()
            t0 = time.monotonic()
            err = None
            try:
                if name == "stint":
                    ckpt.load(planner)
                else:
                    import torch.distributed.checkpoint as dcp
                    dcp.load(r.dtensors, checkpoint_id=dcp_path)
                if r.device == "cuda":
                    r.torch.cuda.synchronize()
            except Exception as e:  # noqa: BLE001
                err = "%s: %s" % (type(e).__name__, e)
            t1 = time.monotonic()
            flags = [None] * r.world
            r.dist.all_gather_object(flags, err)
            bad = [f for f in flags if f]
            if bad:
                skipped[name] = bad[0]
                continue
            r.barrier()
            if run > 0:
                samples.setdefault(name, []).append((t0, t1, t1))
            if run == cfg["repeat"]:
                sums[name] = r.sums()
    if ckpt is not None:
        ckpt.close()
    return {"samples": samples, "skipped": skipped, "sums": sums, "dcp_path": dcp_path}


def worker(cfg_path, rank, world):
    warnings.filterwarnings("ignore")
    with open(cfg_path) as f:
        cfg = json.load(f)
    r = Rank(cfg, rank, world)
    out = save_job(r) if cfg["role"] == "save" else load_job(r)
    with open(cfg_path + ".rank%d.json" % rank, "w") as f:
        json.dump(out, f)
    r.barrier()
    r.dist.destroy_process_group()
    return 0


# -- the parent side ----------------------------------------------------------------


def run_job(cfg, world, work):
    """Runs one job on `world` processes; returns the ranks' outputs."""
    tag = "%s-%d" % (cfg["role"], world)
    cfg_path = os.path.join(work, tag + ".json")
    with open(cfg_path, "w") as f:
        json.dump(cfg, f)
    env = dict(os.environ)
    env.update(OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    procs, logs = [], []
    for rank in range(world):
        log = open(os.path.join(work, "%s-rank%d.log" % (tag, rank)), "w+")
        logs.append(log)
        procs.append(subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--_worker", cfg_path, str(rank),
             str(world)],
            stdout=log if rank > 0 else None, stderr=log, env=env))
    deadline = time.monotonic() + JOB_DEADLINE
    failed = False
    for p in procs:
        try:
            if p.wait(timeout=max(0.1, deadline - time.monotonic())) != 0:
                failed = True
        except subprocess.TimeoutExpired:
            failed = True
            break
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait(timeout=30)
    if failed:
        for rank, log in enumerate(logs):
            log.seek(0)
            sys.stderr.write("---- %s rank %d (exit %s) ----\n%s\n" % (
                tag, rank, procs[rank].returncode, log.read()[-4000:]))
        raise RuntimeError("job %s failed" % tag)
    for log in logs:
        log.close()
    outs = []
    for rank in range(world):
        with open(cfg_path + ".rank%d.json" % rank) as f:
            outs.append(json.load(f))
    return outs


def run_fio(directory, world, nbytes, rw):
    """Aggregate bandwidth (bytes/s) of fio numjobs=world, or (None, why)."""
    bs = 4 << 20
    size = max(bs, nbytes // world // bs * bs)
    why = []
    for engine in ("io_uring", "libaio"):
        bws = []
        for extra in (["--fallocate=none"], []) if rw == "write" else ([],):
            argv = ["fio", "--name=w", "--directory=" + directory, "--rw=" + rw,
                    "--bs=%d" % bs, "--direct=1", "--ioengine=" + engine, "--iodepth=16",
                    "--numjobs=%d" % world, "--group_reporting=1", "--size=%d" % size,
                    "--output-format=json"] + extra
            if rw == "write":
                argv.append("--end_fsync=1")
            try:
                p = subprocess.run(argv, capture_output=True, text=True, timeout=900)
                if p.returncode != 0:
                    raise OSError((p.stderr or p.stdout).strip()[-200:])
                j = json.loads(p.stdout[p.stdout.index("{"):])
                bws.append(float(j["jobs"][0][rw]["bw_bytes"]))
            except (OSError, ValueError, KeyError, subprocess.TimeoutExpired) as e:
                why.append("%s: %s" % (engine, e))
                break
        if bws:
            return max(bws), engine
    return None, "; ".join(why)


def med(xs):
    return statistics.median(xs) if xs else float("nan")


def summarize(outs):
    """{method: {stall, stall_max, durable, runs}} from the ranks' (t0, t1, t2) samples."""
    res = {}
    for name in outs[0]["samples"]:
        per_rank = [o["samples"][name] for o in outs]
        runs = len(per_rank[0])
        if runs == 0:
            continue
        stalls = [s[1] - s[0] for pr in per_rank for s in pr]
        durable = [max(pr[i][2] for pr in per_rank) - min(pr[i][0] for pr in per_rank)
                   for i in range(runs)]
        worst = [max(pr[i][1] - pr[i][0] for pr in per_rank) for i in range(runs)]
        res[name] = {"stall": med(stalls), "stall_max": med(worst), "durable": med(durable),
                     "runs": runs, "durable_runs": durable}
    return res


def bench_world(args, world, base, nbytes_target):
    load_world = args.load_world if args.load_world else max(1, world // 2)
    work = os.path.join(base, "n%d" % world)
    os.makedirs(work)
    names = layout(args.total_mib, world)
    nbytes = sum(rows * WIDTH * 4 for _, rows in names)
    print()
    print("== N = %d processes: %.0f MiB in %d tensors (%.0f MiB per rank), load at M = %d" % (
        world, nbytes / 2**20, len(names), nbytes / world / 2**20, load_world), flush=True)

    fio_w = fio_r = None
    if shutil.which("fio") is None:
        print("fio: not installed (no disk reference)")
    elif args.no_fio:
        print("fio: skipped (--no-fio)")
    else:
        fdir = os.path.join(work, "fio")
        os.makedirs(fdir)
        fio_w, why_w = run_fio(fdir, world, nbytes, "write")
        shutil.rmtree(fdir, ignore_errors=True)
        if fio_w is None:
            print("fio: failed: %s" % why_w)
        else:
            # The load's reference reads as many files at once as the load has ranks.
            os.makedirs(fdir)
            ok, why_r = run_fio(fdir, load_world, nbytes, "write")
            fio_r, why_r = run_fio(fdir, load_world, nbytes, "read") if ok else (None, why_r)
            shutil.rmtree(fdir, ignore_errors=True)
            print("fio (%s, 4 MiB, O_DIRECT, iodepth 16): write numjobs=%d %.2f GB/s, "
                  "read numjobs=%d %s" % (why_w, world, fio_w / 1e9, load_world,
                                          "%.2f GB/s" % (fio_r / 1e9) if fio_r else why_r))

    cfg = {"role": "save", "store": os.path.join(work, "store"), "base": work,
           "total_mib": args.total_mib, "save_world": world, "repeat": args.repeat,
           "methods": args.methods.split(","), "device": args.device}
    outs = run_job(cfg, world, work)
    saved = summarize(outs)
    skipped = outs[0]["skipped"]
    for name, why in skipped.items():
        print("%s: skipped: %s" % (name, why))
    for name, ns in outs[0]["notes"].items():
        for n in ns:
            print("%s: note: %s" % (name, n.strip()))

    lcfg = dict(cfg, role="load", store=os.path.join(work, "load-store"),
                paths=outs[0]["paths"])
    louts = run_job(lcfg, load_world, work)
    loaded = summarize(louts)
    for name, why in louts[0]["skipped"].items():
        print("load %s: skipped: %s" % (name, why))
    # The save job's ranks hold the state; every load must give the same sums back.
    saved_total = sum(sum(o["sums"]) for o in outs)
    for name in louts[0]["sums"]:
        got = sum(sum(o["sums"][name]) for o in louts)
        print("load %s at M=%d: %s (sum %.6g vs saved %.6g)" % (
            name, load_world, "agrees" if abs(got - saved_total) <= 1e-6 * max(1.0, abs(
                saved_total)) + 1e-3 else "DIFFERS", got, saved_total))

    print()
    print("%-26s %9s %9s %13s %11s %8s %12s" % (
        "N=%d, median" % world, "stall s", "worst s", "to-durable s", "persist GB/s",
        "÷ fio", "load@M=%d s" % load_world))
    load_key = {"stint": "stint"}
    for m in DCP_MODES:
        load_key[m] = "dcp.load" if louts[0]["dcp_path"] == outs[0]["paths"].get(m) else None
    for name, s in saved.items():
        gbs = nbytes / s["durable"] / 1e9
        lk = load_key.get(name)
        ld = loaded.get(lk, {}).get("durable") if lk else None
        print("%-26s %9.4f %9.4f %13.3f %11.2f %8s %12s" % (
            name, s["stall"], s["stall_max"], s["durable"], gbs,
            "%.2f" % (gbs * 1e9 / fio_w) if fio_w else "-",
            "%.3f" % ld if ld is not None else "-"))
    if fio_w:
        print("%-26s %9s %9s %13.3f %11.2f %8s %12s" % (
            "fio write (reference)", "-", "-", nbytes / fio_w, fio_w / 1e9, "1.00",
            "%.3f (read)" % (nbytes / fio_r) if fio_r else "-"))

    ph = [x for o in outs for x in o.get("phases", [])]
    if ph:
        print("stint's stats() per rank, median: snapshot %.4f s, persist %.3f s, commit %.3f s "
              "(commit: reports gathered, merged and decided over the store)" % tuple(
                  med([x[i] for x in ph]) for i in range(3)))
    s = saved.get("stint")
    asyncs = {n: saved[n] for n in ("dcp.async_save", "dcp.async_save process") if n in saved}
    dcps = {n: saved[n] for n in DCP_MODES if n in saved}
    print()
    if s and asyncs:
        best = min(asyncs, key=lambda n: asyncs[n]["stall"])
        print("%-46s %7.3f   (target <= 0.5; vs %s)" % (
            "stint stall / DCP's best async stall:", s["stall"] / asyncs[best]["stall"], best))
    if s and dcps:
        best = min(dcps, key=lambda n: dcps[n]["durable"])
        print("%-46s %7.3f   (target <= 0.5; vs %s)" % (
            "stint time-to-durable / DCP's best:", s["durable"] / dcps[best]["durable"], best))
    if s and fio_w:
        print("%-46s %7.3f   (target >= 0.9)" % (
            "stint aggregate persist / fio write:", nbytes / s["durable"] / fio_w))
    if "stint" in loaded and "dcp.load" in loaded:
        print("%-46s %7.3f   (target >= 1.5)" % (
            "dcp.load time / stint load time at M=%d:" % load_world,
            loaded["dcp.load"]["durable"] / loaded["stint"]["durable"]))
    if "stint" in loaded and fio_r:
        print("%-46s %7.3f   (target >= 0.9)" % (
            "stint aggregate load / fio read numjobs=%d:" % load_world,
            nbytes / loaded["stint"]["durable"] / fio_r))
    shutil.rmtree(work, ignore_errors=True)
    return {"world": world, "load_world": load_world, "state_bytes": nbytes, "fio_write": fio_w,
            "fio_read": fio_r, "save": saved, "load": loaded, "skipped": skipped}


def main():
    if len(sys.argv) == 5 and sys.argv[1] == "--_worker":
        return worker(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dir", required=True, help="directory to write in (a sub-folder, removed)")
    p.add_argument("--worlds", default="2,4", help="world sizes N, comma-separated")
    p.add_argument("--total-mib", type=int, default=1024, help="float32 state in all, MiB")
    p.add_argument("--quick", action="store_true", help="a smoke run: --total-mib 256")
    p.add_argument("--repeat", type=int, default=3, help="measured runs (after one warm-up)")
    p.add_argument("--load-world", type=int, default=0, help="M for the loads (default N // 2)")
    p.add_argument("--methods", default="stint," + ",".join(DCP_MODES))
    p.add_argument("--no-fio", action="store_true")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                   help="cuda: rank r holds its shard on GPU r, groups over NCCL")
    p.add_argument("--json", help="write the medians here")
    args = p.parse_args()
    if args.quick:
        args.total_mib = 256

    import torch
    worlds = [int(x) for x in args.worlds.split(",")]
    if args.device == "cuda":
        gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
        need = max(worlds + [args.load_world])
        if gpus < need:
            print("sharded bench on cuda: skipped: %d GPU(s) visible, N = %s needs %d"
                  % (gpus, args.worlds, need))
            return 77
    base = os.path.join(os.path.abspath(args.dir), "stint-sharded-bench-%d" % os.getpid())
    os.makedirs(base)
    print("stint sharded bench, %s, torch %s, %d runs + 1 warm-up per method, on %s, in %s" % (
        time.strftime("%Y-%m-%d %H:%M:%S %Z"), torch.__version__, args.repeat,
        "GPUs (NCCL): %s" % torch.cuda.get_device_name(0) if args.device == "cuda"
        else "CPU (gloo)", base))
    print("machine: %d cores, load average %s at start; shared with other work, so figures move "
          "between runs: read the medians and the ratios, not one absolute number" % (
              os.cpu_count(), " ".join("%.2f" % x for x in os.getloadavg())))
    print("cold reads: before each load rank 0 fsyncs and posix_fadvise(DONTNEED)s every file of "
          "both checkpoints (no root for drop_caches); stint loads with O_DIRECT")
    results = []
    try:
        for w in worlds:
            results.append(bench_world(args, w, base, args.total_mib))
    finally:
        shutil.rmtree(base, ignore_errors=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
