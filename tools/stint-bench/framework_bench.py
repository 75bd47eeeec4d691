#!/usr/bin/env python3
"""Each framework integration of stint against the framework's own default
checkpointing, on CPU, in one run with the same model and state size.

    PYTHONPATH=build/python_bindings .venv/bin/python tools/stint-bench/framework_bench.py \\
        [--mib 512] [--dir DIR] [--runs 4] [--rounds 2] [--every 8] \\
        [--frameworks lightning,huggingface,accelerate,torch_checkpointing,torchtitan] \\
        [--drop-caches] [--fsync-probe] [--tc-direct-io] [--json FILE]
    # a smoke run: --mib 32 --runs 2 --rounds 2 --every 4

The state: a stack of Linear(width, width, bias=False) + Tanh layers trained
with AdamW (parameters + exp_avg + exp_avg_sq: ~12 bytes per parameter),
scaled to at least --mib MiB (512: 11 x Linear(2048, 2048), 528 MiB). Every
way of every framework trains this same model (batch 32 of random rows, MSE)
in sessions of n = 1 + ceil(runs / rounds) checkpoints, after steps every,
2 * every, ..., n * every, and (n + 1) * every - 1 steps in all (so the last
checkpoint has `every` steps after it too).

  lightning            Trainer(accelerator="cpu", devices=1) + ModelCheckpoint(
                       every_n_train_steps=every, save_top_k=-1): the default
                       TorchCheckpointIO (torch.save, synchronous); Lightning's
                       AsyncCheckpointIO plugin (its own async option: clones
                       the checkpoint, torch.save on a thread);
                       stint.lightning.CheckpointIO + stint.lightning.Callback
                       (+ stint.lightning.ResumableSampler, as the README shows)
  huggingface          transformers.Trainer(save_steps=every) on a plain
                       nn.Module (nothing downloaded) vs stint.huggingface.Trainer
  accelerate           Accelerator.save_state(dir) vs
                       stint.accelerate.Accelerator.save_state(step=...)
  torch_checkpointing  CheckpointManager with its local filesystem storage
                       (use_direct_io=False: its default O_DIRECT writes fail
                       with EINVAL on ext4; --tc-direct-io keeps the default),
                       with its synchronous saver and with its asynchronous one
                       (the default: a background process), vs the asynchronous
                       saver on stint.torch_checkpointing.StorageConfig(root)
  torchtitan           its default CheckpointManager (DCP) with async_mode
                       "disabled" (default) and "async", vs
                       stint.torchtitan.CheckpointManager, driven by the calls
                       torchtitan's Trainer makes (config.checkpoint.build(...),
                       save(step) after every step, load(step=-1)); a 1-rank
                       gloo process group for all three ("async" needs one)

Each framework runs in a child process of its own (its log: DIR/<framework>.log).
--rounds sessions per way, the ways in alternating order (forward, reversed,
...), each session a freshly built model, trainer and checkpoint folder. In
each session the first checkpoint is reported apart ("first": staging pools,
saver processes, threads are made then); the others are the steady state.

  stall/ckpt    the wall time of the step that checkpoints minus the median
                step that does not (steps 1 and 2 left out): the extra time
                the training loop spends in the checkpoint's own step.
                Median over the steady-state checkpoints of every session.
  x sync        stall/ckpt / the framework's default synchronous save's.
  added/ckpt    the checkpoint's step and the `every`-1 steps after it, each
                minus the median step before the first checkpoint, summed:
                also what a background copy or write takes from the steps
                that follow (lazy snapshots copy during the next forward).
  to-durable    from the checkpoint call (the step's end, before the
                framework's save hook) until the checkpoint is complete: a
                synchronous save: when its call returns; an async one: when
                its thread / future / process is done; stint: when the step's
                durable future resolves (written, checksummed, fsync'd and
                committed). torch.save, safetensors, Lightning's
                TorchCheckpointIO, Accelerate, transformers and
                torch_checkpointing's local storage do not fsync: their
                "complete" is the page cache. DCP's FileSystemWriter fsyncs
                (sync_files=True). --fsync-probe adds a column: the time
                until an fsync of the files, started on a helper thread as
                the save completes, returns (it perturbs those ways' stall a
                little, hence not by default).
  load s        after a session (every save durable, the framework closed):
                the checkpoint's files are fsync'd and dropped from the page
                cache (posix_fadvise DONTNEED per file; --drop-caches: os.sync()
                and echo 3 > /proc/sys/vm/drop_caches, root, whole machine),
                then a freshly built model (and optimizer) in the same process
                loads the newest checkpoint the framework's way (not a
                killed and restarted process: the interpreter, imports and
                the model's construction are not counted); the load ends
                once every page of the loaded parameters and optimizer state
                was touched (a lazily mmap'd load counts whole).
  loaded=saved  sessions whose load gave back the state of the newest
                checkpoint (the sum of the first weight, taken at the
                checkpoint's step, outside the step's timing, compared bit
                for bit).
  foreign CPU   the most CPU seconds other processes used during one of the
                way's sessions (/proc/stat busy time minus this process tree's):
                above ~1 s, that way's figures are noisy.

The targets (the issue): stint's stall <= 0.2 x the framework's default
synchronous save's, and no slower than the framework's own async option
where it has one (Lightning, torch_checkpointing, torchtitan). This is a
benchmark: it asserts nothing, it reports.
"""

import argparse
import datetime
import gc
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import warnings

FRAMEWORKS = ("lightning", "huggingface", "accelerate", "torch_checkpointing", "torchtitan")
HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))

sys.path.insert(0, HERE)
from node_local_bench import evict  # noqa: E402  (fsync + POSIX_FADV_DONTNEED of a tree)
from framework_bench_ways import BENCHES, Geometry, fingerprint  # noqa: E402


# -- small helpers ------------------------------------------------------------------


def med(xs):
    xs = [x for x in xs if isinstance(x, (int, float)) and not math.isnan(x)]
    return statistics.median(xs) if xs else float("nan")


def fmt(x, digits=3):
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return "%.*f" % (digits, x)


def fs_of(path):
    """(mount point, fs type, device) of the filesystem holding `path`."""
    path = os.path.realpath(path)
    best = ("/", "?", "?")
    try:
        with open("/proc/mounts") as f:
            for line in f:
                dev, mnt, typ = line.split()[:3]
                if (path == mnt or path.startswith(mnt.rstrip("/") + "/")) and \
                        len(mnt) >= len(best[0]):
                    best = (mnt, typ, dev)
    except OSError:
        pass
    return best


def default_dir():
    for d in ("/var/tmp", tempfile.gettempdir()):
        if os.path.isdir(d) and fs_of(d)[1] not in ("tmpfs", "ramfs"):
            return os.path.join(d, "stint-framework-bench")
    return os.path.join(REPO, "framework-bench-tmp")


def files_under(path):
    if os.path.isfile(path):
        return [path]
    return [os.path.join(d, f) for d, _, fs in os.walk(path) for f in fs]


def fsync_tree(path):
    """fsync every file under `path` and the directories holding them."""
    dirs = set()
    for f in files_under(path):
        try:
            fd = os.open(f, os.O_RDONLY)
        except OSError:
            continue
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        dirs.add(os.path.dirname(f))
    for d in dirs:
        try:
            fd = os.open(d, os.O_RDONLY)
        except OSError:
            continue
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def cpu_snapshot():
    """(CPU seconds used by this process and its descendants, busy CPU seconds of
    the whole machine from /proc/stat): their difference over a session is
    what other processes took ("foreign CPU"; the machine may be shared)."""
    tick = os.sysconf("SC_CLK_TCK")
    procs = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % d) as f:
                st = f.read()
        except OSError:
            continue
        rest = st[st.rfind(")") + 2:].split()
        # ppid, then utime stime cutime cstime (reaped children count in cutime/cstime)
        procs[int(d)] = (int(rest[1]), sum(int(x) for x in rest[11:15]))
    kids = {}
    for pid, (ppid, _) in procs.items():
        kids.setdefault(ppid, []).append(pid)
    own, stack = 0, [os.getpid()]
    while stack:
        pid = stack.pop()
        own += procs.get(pid, (0, 0))[1]
        stack += kids.get(pid, [])
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
        busy = (sum(fields[:8]) - fields[3] - fields[4]) / tick  # all but idle and iowait
    except (OSError, ValueError, IndexError):
        busy = float("nan")
    return own / tick, busy


def loadavg():
    try:
        with open("/proc/loadavg") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return "?"


def drop_caches():
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def machine():
    import torch
    cpu = "?"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    versions = {}
    try:
        from importlib.metadata import version
        for pkg in ("lightning", "transformers", "accelerate", "torch_checkpointing",
                    "torchtitan", "safetensors"):
            try:
                versions[pkg] = version(pkg)
            except Exception:  # noqa: BLE001  (not installed)
                versions[pkg] = "not installed"
    except ImportError:
        pass
    try:
        import stint
        versions["stint"] = getattr(stint, "__version__", "?")
    except ImportError as e:
        versions["stint"] = "not importable: %s" % e
    return {"cpu": cpu, "cpus": os.cpu_count(), "torch_threads": torch.get_num_threads(),
            "torch": torch.__version__, "cuda": torch.cuda.is_available(),
            "python": platform.python_version(), "kernel": platform.release(),
            "mem_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
            "versions": versions}


# -- timing one session -------------------------------------------------------------


class Clock:
    """Step starts and, per checkpoint step, when the checkpoint was called,
    when the call returned, when it was complete ("durable") and, with the
    fsync probe, when an fsync of its files returned."""

    def __init__(self, fsync_probe):
        self.fsync_probe = fsync_probe
        self.starts = []
        self.events = {}
        self.threads = []
        self.errors = []
        self.mu = threading.Lock()

    def step_start(self):
        self.starts.append(time.perf_counter())

    def _set(self, step, key, t):
        with self.mu:
            self.events.setdefault(step, {}).setdefault(key, t)

    def call(self, step):
        self._set(step, "t0", time.perf_counter())

    def returned(self, step):
        self._set(step, "ret", time.perf_counter())

    def durable(self, step, fsync_paths=None, fsynced=False):
        """The save of `step` is complete now. fsync_paths: its files (a save
        that does not fsync); fsynced: it did fsync (stint, DCP)."""
        t = time.perf_counter()
        self._set(step, "durable", t)
        if fsynced:
            self._set(step, "fsync", t)
        elif fsync_paths and self.fsync_probe:
            def run():
                try:
                    for p in fsync_paths:
                        fsync_tree(p)
                except OSError as e:
                    self.errors.append("fsync probe %d: %s" % (step, e))
                self._set(step, "fsync", time.perf_counter())
            th = threading.Thread(target=run, daemon=True)
            th.start()
            self.threads.append(th)

    def fingerprint(self, step, module):
        """Notes a fingerprint of the state this checkpoint saves (the sum of the
        first parameter); its cost is taken out of the step's time."""
        t = time.perf_counter()
        v = fingerprint(module)
        self._set(step, "fp", v)
        self._set(step, "fp_cost", time.perf_counter() - t)

    def watch(self, step, wait):
        """A thread waits on `wait()` (a durable future's result) and notes the time."""
        def run():
            try:
                wait()
            except BaseException as e:  # noqa: BLE001  (reported, not raised)
                self.errors.append("step %d: %r" % (step, e))
            self.durable(step, fsynced=True)
        th = threading.Thread(target=run, daemon=True)
        th.start()
        self.threads.append(th)

    def join(self, timeout=900):
        deadline = time.monotonic() + timeout
        for th in self.threads:
            th.join(max(0.0, deadline - time.monotonic()))


def session_stats(clock, every, ckpts):
    """Stall, added time and time to durable of each checkpoint of one session."""
    dt = {i + 1: clock.starts[i + 1] - clock.starts[i] for i in range(len(clock.starts) - 1)}
    for s, ev in clock.events.items():
        if s in dt and "fp_cost" in ev:
            dt[s] -= ev["fp_cost"]
    skip = 2
    non = [v for s, v in dt.items() if s > skip and s not in ckpts]
    base = med(non)
    warm = [v for s, v in dt.items() if skip < s < ckpts[0]]
    wbase = med(warm) if warm else base
    rows = []
    for s in ckpts:
        ev = clock.events.get(s, {})
        t0 = ev.get("t0")
        row = {"step": s,
               "stall": dt[s] - base if s in dt else float("nan"),
               "added": sum(dt[j] - wbase for j in range(s, s + every) if j in dt),
               "durable": ev["durable"] - t0 if t0 and "durable" in ev else float("nan"),
               "fsync": ev["fsync"] - t0 if t0 and "fsync" in ev else float("nan"),
               "call": ev["ret"] - t0 if t0 and "ret" in ev else float("nan")}
        rows.append(row)
    q = sorted(non)
    return {"checkpoints": rows, "step_median": base, "step_warm": wbase,
            "step_p90": q[int(0.9 * (len(q) - 1))] if q else float("nan"),
            "steps": len(dt), "errors": list(clock.errors),
            "fp": clock.events.get(ckpts[-1], {}).get("fp")}


# -- the child: one framework ---------------------------------------------------------


def run_child(args):
    import torch
    torch.set_flush_denormal(True)
    warnings.filterwarnings("ignore")
    g = Geometry(args.mib, args.width, args.batch)
    bench = BENCHES[args.child](args, g)
    out = {"framework": bench.name, "notes": bench.notes, "ways": {}, "geometry":
           g.describe(), "order": []}
    for w in bench.ways:
        out["ways"][w.key] = {"label": w.label, "kind": w.kind, "durable_means": w.durable_means,
                              "sessions": [], "errors": []}
    base = os.path.join(args.dir, bench.name)
    per = max(1, math.ceil(args.runs / args.rounds))
    try:
        bench.setup()
    except Exception:  # noqa: BLE001
        out["error"] = traceback.format_exc()
        return out
    for r in range(args.rounds):
        order = bench.ways if r % 2 == 0 else list(reversed(bench.ways))
        for way in order:
            out["order"].append(way.key)
            res = out["ways"][way.key]
            sdir = os.path.join(base, "%s-r%d" % (way.key, r))
            shutil.rmtree(sdir, ignore_errors=True)
            os.makedirs(sdir)
            clock = Clock(args.fsync_probe)
            print("[%s] round %d: %s" % (bench.name, r, way.label), flush=True)
            try:
                t_session = time.perf_counter()
                cpu0 = cpu_snapshot()
                ckpts, info = bench.session(way, per + 1, sdir, clock)
                cpu1 = cpu_snapshot()
                clock.join()
                stats = session_stats(clock, bench.every, ckpts)
                stats["session_s"] = time.perf_counter() - t_session
                stats["foreign_cpu_s"] = (cpu1[1] - cpu0[1]) - (cpu1[0] - cpu0[0])
                gc.collect()
                if args.drop_caches:
                    drop_caches()
                else:
                    evict(sdir)
                stats["load_s"], loaded = bench.load(way, sdir, info)
                stats["load_fp"] = fingerprint(loaded)
                stats["load_ok"] = stats["load_fp"] == stats["fp"]
                del loaded
                res["sessions"].append(stats)
                print("[%s]   stalls %s  durable %s  load %.3f s (%s); foreign CPU %.1f s" % (
                    bench.name, " ".join(fmt(c["stall"]) for c in stats["checkpoints"]),
                    " ".join(fmt(c["durable"]) for c in stats["checkpoints"]),
                    stats["load_s"], "the saved state" if stats["load_ok"] else
                    "NOT the saved state: %r != %r" % (stats["load_fp"], stats["fp"]),
                    stats["foreign_cpu_s"]), flush=True)
            except Exception:  # noqa: BLE001  (reported; the other ways go on)
                res["errors"].append(traceback.format_exc())
                print(res["errors"][-1], flush=True)
            gc.collect()
            shutil.rmtree(sdir, ignore_errors=True)
    bench.teardown()
    shutil.rmtree(base, ignore_errors=True)
    return out


# -- the parent: every framework, the report ------------------------------------------


def summarize(fw):
    """Per way: medians over the steady-state checkpoints (all but each session's first)."""
    rows = {}
    for key, w in fw["ways"].items():
        steady = [c for s in w["sessions"] for c in s["checkpoints"][1:]]
        first = [s["checkpoints"][0] for s in w["sessions"] if s["checkpoints"]]
        rows[key] = {
            "label": w["label"], "kind": w["kind"], "durable_means": w["durable_means"],
            "n": len(steady),
            "stall": med([c["stall"] for c in steady]),
            "stalls": [c["stall"] for c in steady],
            "first_stall": med([c["stall"] for c in first]),
            "added": med([c["added"] for c in steady]),
            "durable": med([c["durable"] for c in steady]),
            "fsync": med([c["fsync"] for c in steady]),
            "load": med([s["load_s"] for s in w["sessions"]]),
            "load_ok": ("%d/%d" % (sum(1 for s in w["sessions"] if s["load_ok"]),
                                   len(w["sessions"]))) if w["sessions"] else "-",
            "step": med([s["step_median"] for s in w["sessions"]]),
            "step_p90": med([s["step_p90"] for s in w["sessions"]]),
            "foreign": max([s["foreign_cpu_s"] for s in w["sessions"]] or [float("nan")]),
            "errors": w["errors"] + [e for s in w["sessions"] for e in s["errors"]],
        }
    return rows


def print_framework(fw, args):
    print()
    print("== %s ==  (%s; checkpoint every %d steps)" % (fw["framework"], fw["geometry"],
                                                        args.every))
    if fw.get("error"):
        print("   FAILED to set up:\n" + fw["error"])
        return None
    rows = summarize(fw)
    sync = rows.get("sync", {}).get("stall", float("nan"))
    cols = ["way", "stall/ckpt s", "x sync", "first s", "added/ckpt s", "to-durable s"]
    if args.fsync_probe:
        cols.append("+fsync s")
    cols += ["load s", "loaded=saved", "step s (p90)", "foreign CPU s", "stalls s"]
    table = []
    for key, r in rows.items():
        line = [r["label"], fmt(r["stall"]),
                fmt(r["stall"] / sync, 2) if sync and not math.isnan(sync) and sync > 0 else "-",
                fmt(r["first_stall"]), fmt(r["added"]), fmt(r["durable"])]
        if args.fsync_probe:
            line.append(fmt(r["fsync"]))
        line += [fmt(r["load"]), r["load_ok"], "%s (%s)" % (fmt(r["step"]), fmt(r["step_p90"])),
                 fmt(r["foreign"], 1),
                 " ".join(fmt(s, 2) for s in r["stalls"])]
        table.append(line)
    widths = [max(len(c), *(len(t[i]) for t in table)) for i, c in enumerate(cols)]
    print("  " + "  ".join(c.ljust(widths[i]) for i, c in enumerate(cols)))
    for t in table:
        print("  " + "  ".join(v.ljust(widths[i]) for i, v in enumerate(t)))
    print("  to-durable means:")
    for r in rows.values():
        print("    %-48s %s" % (r["label"], r["durable_means"]))
    st = rows.get("stint")
    verdict = {}
    if st is not None and not math.isnan(st["stall"]):
        if sync and not math.isnan(sync) and sync > 0:
            ratio = st["stall"] / sync
            verdict["vs_sync"] = ratio
            print("  target stall <= 0.2 x default sync save: %.3f s / %.3f s = %.3f -> %s" % (
                st["stall"], sync, ratio, "met" if ratio <= 0.2 else "NOT met"))
        else:
            print("  target stall <= 0.2 x default sync save: no ratio, the sync save's stall "
                  "(%s s) is not above the step-to-step noise" % fmt(sync))
        a = rows.get("async")
        if a is not None and not math.isnan(a["stall"]):
            verdict["vs_async"] = (st["stall"], a["stall"])
            print("  target no slower than its own async (%s): stint %.3f s vs %.3f s -> %s"
                  % (a["label"], st["stall"], a["stall"],
                     "met" if st["stall"] <= a["stall"] else "NOT met"))
            print("    added/ckpt: stint %.3f s vs %.3f s; to-durable: stint %.3f s vs %.3f s"
                  % (st["added"], a["added"], st["durable"], a["durable"]))
        else:
            print("  no async option of its own to compare with")
    for n in fw["notes"]:
        print("  note: " + n)
    for key, r in rows.items():
        for e in r["errors"]:
            print("  ERROR in %s:\n%s" % (r["label"], "\n".join(
                "    " + line for line in e.strip().splitlines()[-12:])))
    return {"rows": rows, "verdict": verdict}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mib", type=float, default=512,
                   help="state size (parameters + AdamW state), MiB (default 512)")
    p.add_argument("--width", type=int, default=2048)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--dir", default=None, help="where checkpoints go (default /var/tmp/...)")
    p.add_argument("--runs", type=int, default=4,
                   help="steady-state checkpoints per way, over all rounds (default 4)")
    p.add_argument("--rounds", type=int, default=2,
                   help="sessions per way, ways in alternating order (default 2)")
    p.add_argument("--every", type=int, default=8, help="steps between checkpoints (>= 4)")
    p.add_argument("--frameworks", default=",".join(FRAMEWORKS))
    p.add_argument("--drop-caches", action="store_true",
                   help="before each load: os.sync() + echo 3 > /proc/sys/vm/drop_caches "
                        "(root; the whole machine) instead of evicting the checkpoint's files")
    p.add_argument("--fsync-probe", action="store_true",
                   help="also time an fsync of the files of saves that do not fsync")
    p.add_argument("--tc-direct-io", action="store_true",
                   help="torch_checkpointing's local storage with its default use_direct_io=True")
    p.add_argument("--json", help="write every measurement there")
    p.add_argument("--child", choices=FRAMEWORKS, help=argparse.SUPPRESS)
    p.add_argument("--result", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    a.every = max(4, a.every)
    a.rounds = max(1, a.rounds)
    a.dir = os.path.abspath(a.dir or default_dir())
    return a


def main():
    args = parse_args()
    if args.child:
        out = run_child(args)
        with open(args.result, "w") as f:
            json.dump(out, f)
        return 0
    frameworks = [f.strip() for f in args.frameworks.split(",") if f.strip()]
    for f in frameworks:
        if f not in BENCHES:
            print("unknown framework %r (choose from %s)" % (f, ", ".join(FRAMEWORKS)))
            return 2
    os.makedirs(args.dir, exist_ok=True)
    m = machine()
    g = Geometry(args.mib, args.width, args.batch)
    per = max(1, math.ceil(args.runs / args.rounds))
    mnt, typ, dev = fs_of(args.dir)
    print("framework_bench  %s" % datetime.datetime.now().isoformat(timespec="seconds"))
    print("machine: %s, %d CPUs, %s GiB; torch %s (%d threads, cuda %s), python %s, kernel %s"
          % (m["cpu"], m["cpus"], m["mem_gib"], m["torch"], m["torch_threads"], m["cuda"],
             m["python"], m["kernel"]))
    print("versions: " + ", ".join("%s %s" % kv for kv in m["versions"].items()))
    print("checkpoints in %s (%s on %s, %s)" % (args.dir, typ, dev, mnt))
    print("state: %s; batch %d" % (g.describe(), g.batch))
    print("per way: %d session(s) (ways alternating), each %d checkpoints (the first reported "
          "apart), every %d steps: %d steady-state checkpoints" % (
              args.rounds, per + 1, args.every, per * args.rounds))
    print("page cache before each load: %s" % (
        "os.sync() + echo 3 > /proc/sys/vm/drop_caches (whole machine)" if args.drop_caches
        else "the checkpoint's files fsync'd + posix_fadvise(DONTNEED)"))
    print("load: in-process into a freshly built model/optimizer (not a restarted process); "
          "ends when every page of the loaded state was touched")
    print("load average at the start: %s (the bench shares the cores with whatever else runs: "
          "'foreign CPU s' is the most CPU other processes took during one of a way's "
          "sessions; more than ~1 s makes that way's figures noisy)" % loadavg())
    print("torch.save / safetensors / Lightning / Accelerate / transformers / torch_checkpointing "
          "local storage do not fsync: their to-durable is the save's completion into the page "
          "cache; stint's and DCP's include fsync")
    sys.stdout.flush()
    report = {"machine": m, "args": vars(args), "frameworks": {}}
    t_all = time.perf_counter()
    for f in frameworks:
        log = os.path.join(args.dir, "%s.log" % f)
        result = os.path.join(args.dir, "%s.json" % f)
        cmd = [sys.executable, os.path.abspath(__file__), "--child", f, "--result", result,
               "--mib", str(args.mib), "--width", str(args.width), "--batch", str(args.batch),
               "--dir", args.dir, "--runs", str(args.runs), "--rounds", str(args.rounds),
               "--every", str(args.every)]
        if args.drop_caches:
            cmd.append("--drop-caches")
        if args.fsync_probe:
            cmd.append("--fsync-probe")
        if args.tc_direct_io:
            cmd.append("--tc-direct-io")
        env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
                   TOKENIZERS_PARALLELISM="false", PYTHONWARNINGS="ignore")
        t = time.perf_counter()
        with open(log, "w") as lf:
            rc = subprocess.call(cmd, stdout=lf, stderr=subprocess.STDOUT, env=env)
        took = time.perf_counter() - t
        if rc != 0 or not os.path.exists(result):
            print("\n== %s ==  FAILED (exit %d after %.0f s); the end of %s:" % (f, rc, took, log))
            with open(log) as lf:
                print("".join(lf.readlines()[-30:]))
            report["frameworks"][f] = {"error": "exit %d" % rc}
            continue
        with open(result) as rf:
            fw = json.load(rf)
        os.unlink(result)
        summary = print_framework(fw, args)
        print("  (%.0f s for this framework; load average now %s; its log: %s)"
              % (took, loadavg(), log))
        sys.stdout.flush()
        report["frameworks"][f] = {"raw": fw, "summary": summary, "seconds": took}
    print("\ntotal %.0f s" % (time.perf_counter() - t_all))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
