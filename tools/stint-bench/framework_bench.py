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
LR = 1e-4

sys.path.insert(0, HERE)
from node_local_bench import evict  # noqa: E402  (fsync + POSIX_FADV_DONTNEED of a tree)


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


def touch_pages(*states):
    """Reads one element per 4 KiB page of every tensor in the states: a load
    that maps files lazily (mmap) is counted whole."""
    import torch
    total = 0.0

    def visit(x):
        nonlocal total
        if isinstance(x, torch.Tensor):
            if x.numel():
                t = x.detach().reshape(-1)
                total += float(t[::max(1, 4096 // t.element_size())].float().sum())
        elif isinstance(x, dict):
            for v in x.values():
                visit(v)
        elif isinstance(x, (list, tuple)):
            for v in x:
                visit(v)
    for s in states:
        visit(s)
    return total


def fingerprint(module):
    return float(next(module.parameters()).detach().double().sum())


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


# -- the model ----------------------------------------------------------------------


class Geometry:
    def __init__(self, mib, width, batch):
        w = width
        while True:
            per_layer = 3 * w * w * 4  # fp32 weight + AdamW exp_avg + exp_avg_sq
            layers = max(1, math.ceil(mib * 2**20 / per_layer))
            if layers >= 4 or w <= 256:
                break
            w //= 2
        self.width, self.layers, self.batch = w, layers, batch
        self.params = w * w * layers
        self.state_mib = self.params * 4 * 3 / 2**20

    def describe(self):
        return "%d x Linear(%d, %d, bias=False) + AdamW: %.0f MiB (params %.0f MiB)" % (
            self.layers, self.width, self.width, self.state_mib, self.params * 4 / 2**20)


def make_net(g):
    import torch
    torch.manual_seed(0)
    mods = []
    for _ in range(g.layers):
        lin = torch.nn.Linear(g.width, g.width, bias=False)
        torch.nn.init.normal_(lin.weight, std=g.width ** -0.5)  # keeps activations O(1)
        mods += [lin, torch.nn.Tanh()]
    return torch.nn.Sequential(*mods)


def make_data(g, steps):
    import torch
    gen = torch.Generator().manual_seed(1)
    n = steps * g.batch
    return (torch.randn(n, g.width, generator=gen),
            0.1 * torch.randn(n, g.width, generator=gen))


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


class Way:
    def __init__(self, key, label, kind, durable_means):
        self.key, self.label, self.kind, self.durable_means = key, label, kind, durable_means


# -- the frameworks -----------------------------------------------------------------


class Framework:
    name = ""
    ways = []
    notes = []

    def __init__(self, args, g):
        self.args, self.g = args, g
        self.every = args.every

    def plan(self, n):
        """Checkpoint steps and total steps of a session with n checkpoints."""
        ckpts = [self.every * (i + 1) for i in range(n)]
        return ckpts, (n + 1) * self.every - 1

    def setup(self):
        pass

    def teardown(self):
        pass


class LightningBench(Framework):
    name = "lightning"
    ways = [Way("sync", "TorchCheckpointIO (default, sync)", "sync",
                "save returned (torch.save, no fsync)"),
            Way("async", "AsyncCheckpointIO (Lightning async)", "async",
                "its thread's torch.save returned (no fsync)"),
            Way("stint", "stint.lightning.CheckpointIO", "stint", "durable future (fsync'd)")]
    notes = ["ModelCheckpoint(every_n_train_steps=every, save_top_k=-1, save_last=False) in "
             "every way: one file (stint: one step and its pointer) per checkpoint.",
             "load: the CheckpointIO's load_checkpoint() of the newest checkpoint's path, then "
             "model.load_state_dict + AdamW.load_state_dict (what Trainer.fit(ckpt_path=) does "
             "with it), for a fresh LightningModule."]

    def setup(self):
        import lightning as L
        import lightning.pytorch as pl
        import torch
        import torch.nn.functional as F
        from lightning.fabric.plugins import TorchCheckpointIO
        import stint.lightning as sl
        g = self.g

        class Net(L.LightningModule):
            def __init__(self):
                super().__init__()
                self.net = make_net(g)

            def training_step(self, batch, batch_idx):
                x, y = batch
                return F.mse_loss(self.net(x), y)

            def configure_optimizers(self):
                return torch.optim.AdamW(self.parameters(), lr=LR)

        class Timer(pl.Callback):
            def __init__(self, clock, every, total):
                self.clock, self.every, self.total = clock, every, total

            def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
                self.clock.step_start()

            def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
                s = trainer.global_step
                if s % self.every == 0:
                    if s + self.every > self.total:  # the last checkpoint: the one loaded
                        self.clock.fingerprint(s, pl_module)
                    self.clock.call(s)  # ModelCheckpoint's hook runs after this one
                if s == self.total:
                    self.clock.step_start()

        class RecIO(TorchCheckpointIO):
            def __init__(self, clock):
                super().__init__()
                self.clock, self.paths = clock, {}

            def save_checkpoint(self, checkpoint, path, storage_options=None):
                step = int(checkpoint["global_step"])
                super().save_checkpoint(checkpoint, path, storage_options)
                self.paths[step] = os.fspath(path)
                self.clock.durable(step, [os.fspath(path)])

        class RecStint(sl.CheckpointIO):
            def __init__(self, root, clock):
                super().__init__(root)
                self.clock, self.paths = clock, {}

            def save_checkpoint(self, checkpoint, path, storage_options=None):
                step = int(checkpoint["global_step"])
                super().save_checkpoint(checkpoint, path, storage_options)
                self.paths[step] = os.fspath(path)
                fut = self._pending.get(step)
                if fut is not None:
                    self.clock.watch(step, fut.result)
                else:  # durable already when save_checkpoint polled
                    self.clock.durable(step, fsynced=True)

        self.L, self.pl, self.sl, self.torch = L, pl, sl, torch
        self.Net, self.Timer, self.RecIO, self.RecStint = Net, Timer, RecIO, RecStint
        self.TorchCheckpointIO = TorchCheckpointIO
        import logging
        for name in ("lightning", "lightning.pytorch", "lightning.fabric"):
            logging.getLogger(name).setLevel(logging.ERROR)

    def session(self, way, n, sdir, clock):
        from lightning.pytorch.callbacks import ModelCheckpoint
        from lightning.pytorch.plugins.io import AsyncCheckpointIO
        from torch.utils.data import DataLoader, TensorDataset
        ckpts, total = self.plan(n)
        x, y = make_data(self.g, total)
        callbacks = [self.Timer(clock, self.every, total)]
        if way.kind == "stint":
            io = self.RecStint(os.path.join(sdir, "stint"), clock)
            rec = io
            plugin = io
            callbacks.append(self.sl.Callback())
            loader = DataLoader(TensorDataset(x, y), batch_sampler=self.sl.ResumableSampler(
                len(x), global_batch=self.g.batch, seed=1, rank=0, world_size=1))
        else:
            rec = self.RecIO(clock)
            plugin = rec if way.kind == "sync" else AsyncCheckpointIO(rec)
            loader = DataLoader(TensorDataset(x, y), batch_size=self.g.batch)
        callbacks.append(ModelCheckpoint(dirpath=os.path.join(sdir, "links"),
                                         every_n_train_steps=self.every, save_top_k=-1,
                                         save_last=False))
        trainer = self.L.Trainer(
            accelerator="cpu", devices=1, max_steps=total, plugins=[plugin], logger=False,
            enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
            default_root_dir=sdir, use_distributed_sampler=False, callbacks=callbacks)
        model = self.Net()
        trainer.fit(model, train_dataloaders=loader)  # teardown waits for the async saves
        if way.kind == "stint":
            io.close()
        return ckpts, {"path": rec.paths[max(rec.paths)]}

    def load(self, way, sdir, info):
        model = self.Net()
        opt = model.configure_optimizers()
        io = (self.sl.CheckpointIO(os.path.join(sdir, "stint")) if way.kind == "stint"
              else self.TorchCheckpointIO())
        t = time.perf_counter()
        ckpt = io.load_checkpoint(info["path"])
        model.load_state_dict(ckpt["state_dict"])
        opt.load_state_dict(ckpt["optimizer_states"][0])
        touch_pages(model.state_dict(), opt.state_dict()["state"])
        dt = time.perf_counter() - t
        if way.kind == "stint":
            io.close()
        return dt, model


class HuggingFaceBench(Framework):
    name = "huggingface"
    ways = [Way("sync", "Trainer save_steps (default, sync)", "sync",
                "_save_checkpoint returned (safetensors + torch.save, no fsync)"),
            Way("stint", "stint.huggingface.Trainer", "stint", "durable future (fsync'd)")]
    notes = ["transformers.Trainer has no asynchronous checkpoint option.",
             "the model: a plain nn.Module (forward(x, labels) -> {'loss'}) with the bench's "
             "layers; optimizer: the Trainer's default (TrainingArguments.optim).",
             "the end-of-training save (save_strategy='steps' saves at max_steps) is turned "
             "off by a callback, in both ways.",
             "load: a fresh Trainer's create_optimizer_and_scheduler() (not timed), then the "
             "methods train(resume_from_checkpoint=) calls: _load_from_checkpoint, "
             "_load_optimizer_and_scheduler, _load_rng_state."]

    def setup(self):
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        import torch
        import torch.nn.functional as F
        import transformers
        from transformers import TrainerCallback
        import stint.huggingface as sh
        transformers.logging.set_verbosity_error()
        g = self.g

        class Net(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.net = make_net(g)

            def forward(self, x=None, labels=None):
                return {"loss": F.mse_loss(self.net(x), labels)}

        class Rows(torch.utils.data.Dataset):
            def __init__(self, x, y):
                self.x, self.y = x, y

            def __len__(self):
                return len(self.x)

            def __getitem__(self, i):
                return {"x": self.x[i], "labels": self.y[i]}

        class Timer(TrainerCallback):
            def __init__(self, clock, every, total):
                self.clock, self.every, self.total = clock, every, total

            def on_step_begin(self, args, state, control, **kwargs):
                self.clock.step_start()

            def on_step_end(self, args, state, control, **kwargs):
                s = state.global_step
                if s % self.every == 0 and s < self.total:
                    if s + self.every > self.total:  # the last checkpoint: the one loaded
                        self.clock.fingerprint(s, kwargs["model"])
                    self.clock.call(s)
                if s >= self.total:
                    self.clock.step_start()
                    control.should_save = False  # no end-of-training checkpoint
                return control

        class RecTrainer(transformers.Trainer):
            bench_clock = None

            def _save_checkpoint(self, model, trial):
                super()._save_checkpoint(model, trial)
                step = self.state.global_step
                folder = os.path.join(self._get_output_dir(trial=trial), "checkpoint-%d" % step)
                if self.bench_clock is not None:
                    self.bench_clock.durable(step, [folder])

        class RecStint(sh.Trainer):
            bench_clock = None

            def _save_checkpoint(self, model, trial):
                super()._save_checkpoint(model, trial)
                step = self.state.global_step
                if self.bench_clock is None:
                    return
                for s, _folder, durable, _st in self._stint_pending:
                    if s == step:
                        self.bench_clock.watch(step, durable.result)
                        return
                self.bench_clock.durable(step, fsynced=True)

        self.transformers, self.torch = transformers, torch
        self.Net, self.Rows, self.Timer = Net, Rows, Timer
        self.RecTrainer, self.RecStint = RecTrainer, RecStint

    def _args(self, sdir, total):
        return self.transformers.TrainingArguments(
            output_dir=os.path.join(sdir, "hf"), max_steps=total, save_strategy="steps",
            save_steps=self.every, per_device_train_batch_size=self.g.batch, learning_rate=LR,
            use_cpu=True, report_to=[], logging_strategy="no", disable_tqdm=True,
            dataloader_num_workers=0, seed=0)

    def _trainer(self, way, sdir, total, clock, callbacks):
        x, y = make_data(self.g, total)
        kwargs = dict(model=self.Net(), args=self._args(sdir, total),
                      train_dataset=self.Rows(x, y), callbacks=callbacks)
        if way.kind == "stint":
            tr = self.RecStint(stint_root=os.path.join(sdir, "stint"), **kwargs)
        else:
            tr = self.RecTrainer(**kwargs)
        tr.bench_clock = clock
        return tr

    def session(self, way, n, sdir, clock):
        ckpts, total = self.plan(n)
        tr = self._trainer(way, sdir, total, clock, [self.Timer(clock, self.every, total)])
        tr.train()
        if way.kind == "stint":
            tr.close_stint()
        return ckpts, {"folder": os.path.join(sdir, "hf", "checkpoint-%d" % ckpts[-1]),
                       "total": total}

    def load(self, way, sdir, info):
        tr = self._trainer(way, sdir, info["total"], None, [])
        tr.create_optimizer_and_scheduler(num_training_steps=info["total"])
        folder = info["folder"]
        t = time.perf_counter()
        tr._load_from_checkpoint(folder)
        tr._load_optimizer_and_scheduler(folder)
        tr._load_rng_state(folder)
        touch_pages(tr.model.state_dict(), tr.optimizer.state_dict()["state"])
        dt = time.perf_counter() - t
        if way.kind == "stint":
            tr.close_stint()
        return dt, tr.model


class AccelerateBench(Framework):
    name = "accelerate"
    ways = [Way("sync", "Accelerator.save_state(dir) (default, sync)", "sync",
                "save_state returned (safetensors + torch.save, no fsync)"),
            Way("stint", "stint.accelerate save_state(step=)", "stint",
                "durable future (fsync'd)")]
    notes = ["Accelerate has no asynchronous save_state.",
             "stint way as the README shows: DataLoaderConfiguration(use_stateful_dataloader="
             "True), stint_step_end(step) after every step; its snapshots are lazy (the model "
             "and optimizer are attached: the next forward / optimizer step waits for the "
             "copies), so part of its cost lands in the step after the checkpoint: see "
             "added/ckpt.",
             "load: a fresh Accelerator, model, AdamW, scheduler and loader, prepared (not "
             "timed), then load_state(dir) / stint's load_state()."]

    def setup(self):
        import accelerate
        import torch
        from accelerate.utils import DataLoaderConfiguration
        import stint.accelerate as sa
        self.accelerate, self.torch, self.sa = accelerate, torch, sa
        self.DataLoaderConfiguration = DataLoaderConfiguration

    def _build(self, way, sdir, total):
        import accelerate.state as st
        from torch.utils.data import DataLoader, TensorDataset
        torch = self.torch
        st.AcceleratorState._reset_state(True)
        st.GradientState._reset_state()
        model = make_net(self.g)
        opt = torch.optim.AdamW(model.parameters(), lr=LR)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
        x, y = make_data(self.g, total)
        loader = DataLoader(TensorDataset(x, y), batch_size=self.g.batch)
        if way.kind == "stint":
            acc = self.sa.Accelerator(cpu=True, stint_root=os.path.join(sdir, "stint"),
                                      dataloader_config=self.DataLoaderConfiguration(
                                          use_stateful_dataloader=True))
        else:
            acc = self.accelerate.Accelerator(cpu=True)
        model, opt, sched, loader = acc.prepare(model, opt, sched, loader)
        return acc, model, opt, sched, loader

    def session(self, way, n, sdir, clock):
        import torch.nn.functional as F
        ckpts, total = self.plan(n)
        acc, model, opt, sched, loader = self._build(way, sdir, total)
        step, last = 0, None
        for x, y in loader:
            clock.step_start()
            loss = F.mse_loss(model(x), y)
            acc.backward(loss)
            opt.step()
            sched.step()
            opt.zero_grad()
            step += 1
            if step in ckpts:
                if step == ckpts[-1]:
                    clock.fingerprint(step, model)
                clock.call(step)
                if way.kind == "stint":
                    acc.save_state(step=step)
                    clock.returned(step)
                    fut = [d for s, _f, d in acc._stint_pending if s == step]
                    if fut:
                        clock.watch(step, fut[0].result)
                    else:
                        clock.durable(step, fsynced=True)
                else:
                    last = os.path.join(sdir, "step-%d" % step)
                    acc.save_state(last)
                    clock.returned(step)
                    clock.durable(step, [last])
            if way.kind == "stint":
                acc.stint_step_end(step)
            if step >= total:
                break
        clock.step_start()
        acc.end_training()  # stint: waits until every save is durable, closes
        return ckpts, {"dir": last, "total": total}

    def load(self, way, sdir, info):
        acc, model, opt, sched, loader = self._build(way, sdir, info["total"])
        t = time.perf_counter()
        if way.kind == "stint":
            acc.load_state()
        else:
            acc.load_state(info["dir"])
        touch_pages(model.state_dict(), opt.state_dict()["state"])
        dt = time.perf_counter() - t
        acc.end_training()
        return dt, model


class TorchCheckpointingBench(Framework):
    name = "torch_checkpointing"
    ways = [Way("sync", "CheckpointManager sync saver, local fs", "sync",
                "save returned (local storage, no fsync)"),
            Way("async", "CheckpointManager async saver, local fs (default)", "async",
                "write future done (background process; no fsync)"),
            Way("stint", "async saver + stint StorageConfig(root)", "stint",
                "write future done = stint step durable (fsync'd)")]
    notes = ["its default local storage, LocalFileSystemStorageConfig(use_direct_io=True), "
             "fails here (ext4): every write raises OSError EINVAL (O_DIRECT through Python's "
             "buffered file, unaligned buffers); the local-fs ways use use_direct_io=False "
             "(--tc-direct-io: the default, to see it fail).",
             "the saver's default is asynchronous (a background process writes); the "
             "synchronous saver is CheckpointManager.Config(save=SyncCheckpointSaverConfig()).",
             "optimizer.step() runs under manager.lock() (as torch_checkpointing asks with an "
             "async saver: its staging may still read the state); a no-op with the sync saver.",
             "payload {'model': model.state_dict(), 'optim': opt.state_dict(), 'step': N}, "
             "saved to <root>/step-N.",
             "load: a fresh manager (sync saver, same storage; not timed), then manager.load("
             "path, into={'model': model.state_dict(), 'optim': None, 'step': None}) + "
             "AdamW.load_state_dict."]

    def setup(self):
        import torch
        from torch_checkpointing import CheckpointManager
        from torch_checkpointing.config import SyncCheckpointSaverConfig
        from torch_checkpointing.storage.filesystem import LocalFileSystemStorageConfig
        self.LocalFileSystemStorageConfig = LocalFileSystemStorageConfig
        import stint.torch_checkpointing as stc
        self.torch, self.CheckpointManager, self.stc = torch, CheckpointManager, stc
        self.SyncCheckpointSaverConfig = SyncCheckpointSaverConfig

    def _config(self, way, root, for_load=False):
        cm = self.CheckpointManager
        kwargs = {}
        if way.kind == "stint":
            kwargs["storage_config"] = self.stc.StorageConfig(root=root)
        elif not self.args.tc_direct_io:
            kwargs["storage_config"] = self.LocalFileSystemStorageConfig(use_direct_io=False)
        if way.kind == "sync" or for_load:
            kwargs["save"] = self.SyncCheckpointSaverConfig()
        return cm.Config(**kwargs)

    def session(self, way, n, sdir, clock):
        import torch.nn.functional as F
        torch = self.torch
        ckpts, total = self.plan(n)
        root = os.path.join(sdir, "ckpt")
        os.makedirs(root, exist_ok=True)
        manager = self.CheckpointManager(self._config(way, root))
        model = make_net(self.g)
        opt = torch.optim.AdamW(model.parameters(), lr=LR)
        xs, ys = make_data(self.g, total)
        path = None
        for step in range(1, total + 1):
            clock.step_start()
            rows = slice((step - 1) * self.g.batch, step * self.g.batch)
            loss = F.mse_loss(model(xs[rows]), ys[rows])
            loss.backward()
            with manager.lock():
                opt.step()
            opt.zero_grad()
            if step in ckpts:
                if step == ckpts[-1]:
                    clock.fingerprint(step, model)
                clock.call(step)
                path = os.path.join(root, "step-%d" % step)
                fut = manager.save(path, {"model": model.state_dict(),
                                          "optim": opt.state_dict(), "step": step})
                clock.returned(step)
                if fut is None:
                    clock.durable(step, [path])
                elif way.kind == "stint":
                    fut.add_done_callback(lambda f, s=step: clock.durable(s, fsynced=True))
                else:
                    fut.add_done_callback(lambda f, s=step, p=path: clock.durable(s, [p]))
        clock.step_start()
        manager.close()  # waits for the last write
        return ckpts, {"path": path, "root": root}

    def load(self, way, sdir, info):
        torch = self.torch
        manager = self.CheckpointManager(self._config(way, info["root"], for_load=True))
        model = make_net(self.g)
        opt = torch.optim.AdamW(model.parameters(), lr=LR)
        path = info["path"]
        t = time.perf_counter()
        if way.kind == "stint":
            path = self.stc.latest_checkpoint(info["root"])
        got = manager.load(path, into={"model": model.state_dict(), "optim": None,
                                       "step": None})
        opt.load_state_dict(got["optim"])
        touch_pages(model.state_dict(), opt.state_dict()["state"])
        dt = time.perf_counter() - t
        manager.close()
        return dt, model


class TorchTitanBench(Framework):
    name = "torchtitan"
    ways = [Way("sync", "DCP manager, async_mode=disabled (default)", "sync",
                "save returned (DCP FileSystemWriter fsyncs)"),
            Way("async", "DCP manager, async_mode=async", "async",
                "save_future done (dcp.async_save; fsyncs)"),
            Way("stint", "stint.torchtitan.CheckpointManager", "stint",
                "save_future (durable, fsync'd)")]
    notes = ["torchtitan's Trainer itself needs an accelerator: the managers are driven by the "
             "calls it makes (config.checkpoint.build(...), save(step) after every step, "
             "load(step=-1)), with its ModelWrapper, OptimizersContainer (AdamW, for-loop), "
             "LRSchedulersContainer and ParallelAwareDataloader, in a 1-rank gloo process "
             "group (async_mode='async' makes a gloo group; so the stint manager is "
             "collective over a world of 1 here).",
             "async_mode='async_with_pinned_mem' (pinned-memory staging, a process) needs "
             "CUDA: not measured on a machine without it.",
             "keep_latest_k=3 and interval=every for every way; load: a fresh model, "
             "containers and manager (not timed), then load(step=-1)."]

    def setup(self):
        import torch
        import torch.distributed as dist
        self.torch, self.dist = torch, dist
        self._store = None
        if not dist.is_initialized():
            self._store = os.path.join(self.args.dir, "torchtitan-pg-store")
            if os.path.exists(self._store):
                os.unlink(self._store)
            dist.init_process_group("gloo", init_method="file://" + self._store, rank=0,
                                    world_size=1)
        from torch.distributed.checkpoint.stateful import Stateful
        from torchtitan.components.checkpointer import CheckpointManager as TitanManager
        from torchtitan.components.dataloader import ParallelAwareDataloader
        from torchtitan.components.optimizer import OptimizersContainer, ParamGroupConfig
        from torchtitan.components.optimizer.lr_scheduler import LRSchedulersContainer
        import stint.torchtitan as stt
        import logging
        logging.getLogger("torchtitan").setLevel(logging.WARNING)

        class TrainState(Stateful):
            def __init__(self):
                self.step = 0

            def state_dict(self):
                return {"step": torch.tensor(self.step)}

            def load_state_dict(self, sd):
                self.step = int(sd["step"])

        self.TrainState, self.TitanManager, self.StintManager = TrainState, TitanManager, \
            stt.CheckpointManager
        self.ParallelAwareDataloader = ParallelAwareDataloader
        self.OptimizersContainer, self.ParamGroupConfig = OptimizersContainer, ParamGroupConfig
        self.LRSchedulersContainer = LRSchedulersContainer

    def teardown(self):
        if self.dist.is_initialized():
            self.dist.destroy_process_group()
        if self._store is not None and os.path.exists(self._store):
            os.unlink(self._store)

    def _build(self, way, sdir, total):
        torch = self.torch
        model = make_net(self.g)
        opts = self.OptimizersContainer(
            self.OptimizersContainer.Config(
                param_groups=[self.ParamGroupConfig(pattern=".*", optimizer_name="AdamW",
                                                    optimizer_kwargs={"lr": LR})],
                implementation="for-loop"),
            model_parts=[model])
        scheds = self.LRSchedulersContainer(opts, lambda s: 1.0)
        x, y = make_data(self.g, total)
        data = torch.utils.data.TensorDataset(x, y)
        sampler = torch.utils.data.DistributedSampler(data, num_replicas=1, rank=0,
                                                      shuffle=False)
        loader = self.ParallelAwareDataloader(data, dp_rank=0, dp_world_size=1,
                                              batch_size=self.g.batch, sampler=sampler)
        ts = self.TrainState()
        common = dict(enable=True, folder="checkpoint", interval=self.every, keep_latest_k=3,
                      last_save_model_only=False)
        if way.kind == "stint":
            cfg = self.StintManager.Config(**common)
        else:
            cfg = self.TitanManager.Config(
                async_mode="async" if way.kind == "async" else "disabled", **common)
        manager = cfg.build(dataloader=loader, model_parts=[model], optimizers=opts,
                            lr_schedulers=scheds, states={"train_state": ts}, sd_adapter=None,
                            base_folder=sdir)
        return manager, model, opts, scheds, loader, ts

    def session(self, way, n, sdir, clock):
        import torch.nn.functional as F
        ckpts, total = self.plan(n)
        manager, model, opts, scheds, loader, ts = self._build(way, sdir, total)
        batches = iter(loader)
        for step in range(1, total + 1):
            clock.step_start()
            x, y = next(batches)
            loss = F.mse_loss(model(x), y)
            loss.backward()
            opts.step()
            scheds.step()
            opts.zero_grad()
            ts.step = step
            if step in ckpts:
                if step == ckpts[-1]:
                    clock.fingerprint(step, model)
                clock.call(step)
            manager.save(step, last_step=False)
            if step in ckpts:
                clock.returned(step)
                fut = getattr(manager, "save_future", None)
                if way.kind == "sync" or fut is None:
                    clock.durable(step, fsynced=True)
                elif way.kind == "stint":
                    clock.watch(step, fut.result)
                else:
                    fut.add_done_callback(lambda f, s=step: clock.durable(s, fsynced=True))
        clock.step_start()
        manager.maybe_wait_for_saving()
        manager.close()
        return ckpts, {"total": total}

    def load(self, way, sdir, info):
        manager, model, opts, scheds, loader, ts = self._build(way, sdir, info["total"])
        t = time.perf_counter()
        manager.load(step=-1)
        touch_pages(model.state_dict(), opts.state_dict())
        dt = time.perf_counter() - t
        manager.close()
        return dt, model


BENCHES = {b.name: b for b in (LightningBench, HuggingFaceBench, AccelerateBench,
                               TorchCheckpointingBench, TorchTitanBench)}


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
