"""framework_bench's model and the frameworks it measures: each framework's ways
(its default checkpointing, its own async option, stint's integration) as a
Framework whose session() trains the same model and checkpoints it, and whose
load() loads the newest checkpoint back. framework_bench.py runs them and
reports (see its docstring for what is measured and how)."""

import math
import os
import time

LR = 1e-4


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
