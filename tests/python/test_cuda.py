"""CUDA state dicts through stint.Checkpointer on a real device: lazy
snapshots with attach() while training goes on (the checkpoint is the state
of the save's moment, bit for bit, BatchNorm statistics included), eager
snapshots, map_location (a device or a dict), a checkpoint saved from a GPU
this process lacks, and a DTensor's local shard on CUDA.

Every test that needs a GPU skips without one (tools/gpu_check.sh runs them
on a GPU machine); the device mapping rule itself (pytree._device_for) is
tested here on any machine.
"""

import os

import pytest
import torch

import stint
from stint import pytree
from util import same_bits

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
needs_2_gpus = pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.device_count() < 2, reason="needs 2 CUDA devices")


def cpu_copy(x):
    """The state as CPU copies (what the checkpoint must hold)."""
    if isinstance(x, torch.Tensor):
        return x.detach().cpu().clone()
    if isinstance(x, dict):
        return type(x)((k, cpu_copy(v)) for k, v in x.items())
    if isinstance(x, (list, tuple)):
        return type(x)(cpu_copy(v) for v in x)
    return x


def assert_same_state(expected, actual, path="state", devices=None):
    """Same structure and values, tensors bit for bit; `devices`: the device
    type every tensor of `actual` must be on (None: not checked)."""
    if isinstance(expected, torch.Tensor):
        assert isinstance(actual, torch.Tensor), path
        assert same_bits(expected, actual), "%s: tensors differ" % path
        if devices is not None:
            assert actual.device.type == devices, "%s on %s" % (path, actual.device)
        return
    if isinstance(expected, dict):
        assert set(expected) == set(actual), "%s: keys %s vs %s" % (path, list(expected), list(actual))
        for k in expected:
            assert_same_state(expected[k], actual[k], "%s[%r]" % (path, k), devices)
        return
    if isinstance(expected, (list, tuple)):
        assert len(expected) == len(actual), path
        for i, (a, b) in enumerate(zip(expected, actual)):
            assert_same_state(a, b, "%s[%d]" % (path, i), devices)
        return
    assert expected == actual, "%s: %r vs %r" % (path, expected, actual)


def make_model(seed=0, device="cuda", batch_norm=True):
    torch.manual_seed(seed)
    # Wide enough (~100 MB with AdamW's moments) that the device-to-host copy
    # outlasts the kernels queued right after save(): a missing barrier shows.
    norm = torch.nn.BatchNorm1d(2048) if batch_norm else torch.nn.Identity()
    model = torch.nn.Sequential(torch.nn.Linear(1024, 2048), norm,
                                torch.nn.ReLU(), torch.nn.Linear(2048, 256)).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    return model, opt


def batch(i, device="cuda"):
    g = torch.Generator().manual_seed(1000 + i)
    return (torch.randn(128, 1024, generator=g).to(device),
            torch.randn(128, 256, generator=g).to(device))


def train_step(model, opt, i, device="cuda", ckpt=None):
    """One step; `ckpt` (lazy, without attach()): the explicit barriers."""
    x, y = batch(i, device)
    model.train()
    if ckpt is not None:
        ckpt.before_write("forward")
    opt.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()
    if ckpt is not None:
        ckpt.before_write("optimizer_step")
    opt.step()


def state_of(model, opt):
    return {"model": model.state_dict(), "optim": opt.state_dict()}


@needs_cuda
def test_attach_lazy_save_is_the_state_at_save_time(root):
    model, opt = make_model(1)
    for i in range(3):
        train_step(model, opt, i)
    with stint.Checkpointer(root) as ckpt:
        ckpt.attach(model, opt)
        assert ckpt.lazy
        expected = {}
        handles = []
        for step in (3, 6, 9):  # the first save also pins the staging buffers
            expected[step] = cpu_copy(state_of(model, opt))
            handles.append(ckpt.save(step, state_of(model, opt)))
            # Training at once: the hooks order the forward after the buffers'
            # copies and the optimizer step after everything else's.
            for i in range(step, step + 3):
                train_step(model, opt, i)
        for h in handles:
            h.durable.result(timeout=120)
        ckpt.detach()
        now = cpu_copy(state_of(model, opt))
        # The state moved on (else this proves nothing), BatchNorm's statistics too.
        assert not same_bits(now["model"]["0.weight"], expected[9]["model"]["0.weight"])
        assert not same_bits(now["model"]["1.running_mean"], expected[9]["model"]["1.running_mean"])
        for step in (3, 6, 9):
            back = ckpt.load(step=step, map_location="cpu")
            assert_same_state(expected[step], back, "step %d" % step, devices="cpu")
            assert back["model"]["1.num_batches_tracked"].item() == step


@needs_cuda
def test_explicit_barriers_and_wait_staged_without_hooks(root):
    """snapshot="lazy" without attach(): before_write() and wait_staged() by
    hand. No BatchNorm here: without attach() nothing tells stint which
    tensors the forward pass writes (see the next test)."""
    model, opt = make_model(2, batch_norm=False)
    train_step(model, opt, 0)
    with stint.Checkpointer(root, snapshot="lazy") as ckpt:
        expected = cpu_copy(state_of(model, opt))
        ckpt.save(1, state_of(model, opt))
        for i in range(1, 4):
            train_step(model, opt, i, ckpt=ckpt)
        before_wait = cpu_copy(state_of(model, opt))
        ckpt.save(4, state_of(model, opt))
        ckpt.wait_staged()  # the blunt form: anything may write now
        with torch.no_grad():
            for p in model.parameters():
                p.add_(1.0)
        ckpt.flush()
        assert_same_state(expected, ckpt.load(step=1, map_location="cpu"), "step 1")
        assert_same_state(before_wait, ckpt.load(step=4, map_location="cpu"), "step 4")


@needs_cuda
def test_optimizer_on_a_side_stream_waits_for_the_copy(root):
    """The barrier orders the stream current when it is called (the one the
    optimizer writes on), not the stream the tensors were saved from: a
    write enqueued on a side stream right after before_write() must not
    reach the checkpoint. (device-unverified when written)"""
    w = torch.full((128 << 20,), 1.5, device="cuda")  # 512 MB: the copy outlasts the write
    expected = w.cpu()
    side = torch.cuda.Stream()
    with stint.Checkpointer(root, snapshot="lazy") as ckpt:
        ckpt.save(1, {"w": w})  # on the default stream
        with torch.cuda.stream(side):
            ckpt.before_write("optimizer_step")
            w.fill_(-7.0)  # the "optimizer step", on the side stream
        side.synchronize()
        ckpt.flush()
        assert same_bits(expected, ckpt.load(step=1, map_location="cpu")["w"])


@needs_2_gpus
def test_checkpointer_made_before_set_device_uses_only_that_device(root, tmp_path):
    """A rank that creates its Checkpointer before torch.cuda.set_device(1)
    saves and loads device 1's tensors without creating a context on device
    0 (checked in a fresh process: torch.cuda's own state is per process).
    (device-unverified when written)"""
    import subprocess
    import sys
    script = tmp_path / "rank.py"
    script.write_text(
        "import ctypes, sys, torch, stint\n"
        "ckpt = stint.Checkpointer(sys.argv[1], snapshot='lazy')\n"
        "torch.cuda.set_device(1)\n"
        "w = torch.arange(1 << 20, dtype=torch.float32, device='cuda')\n"
        "ckpt.save(1, {'w': w}); ckpt.flush()\n"
        "back = ckpt.load(step=1)\n"
        "assert back['w'].device == torch.device('cuda', 1), back['w'].device\n"
        "assert torch.equal(back['w'].cpu(), w.cpu())\n"
        "ckpt.close()\n"
        "cuda = ctypes.CDLL('libcuda.so.1')\n"
        "flags, active = ctypes.c_uint(), ctypes.c_int()\n"
        "assert cuda.cuDevicePrimaryCtxGetState(0, ctypes.byref(flags), ctypes.byref(active)) == 0\n"
        "print('device0_active', active.value)\n")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (os.environ.get("STINT_PYTHON_PATH"), os.environ.get("PYTHONPATH")) if p)
    out = subprocess.run([sys.executable, str(script), str(root)], env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "device0_active 0" in out.stdout, out.stdout + out.stderr


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=needs_cuda)])
def test_before_write_forward_without_attach_protects_buffers(root, device):
    """The documented loop without attach(): before_write("forward") before
    the forward pass. A buffer the forward writes must be saved as it was."""
    torch.manual_seed(0)
    # A large tensor ahead of the buffer, so its copy is still pending.
    model = torch.nn.Sequential(torch.nn.Linear(8192, 4096), torch.nn.BatchNorm1d(4096)).to(device)
    with stint.Checkpointer(root, snapshot="lazy", threads=1) as ckpt:
        for step in (1, 2, 3):
            expected = cpu_copy(model.state_dict())
            ckpt.save(step, {"model": model.state_dict()})
            ckpt.before_write("forward")
            with torch.no_grad():
                model[1].running_mean.add_(1.0)  # what the forward pass does
            ckpt.before_write("optimizer_step")
            ckpt.flush()
            back = ckpt.load(step=step, map_location="cpu")
            assert same_bits(expected["1.running_mean"], back["model"]["1.running_mean"]), step


@needs_cuda
def test_eager_save_returns_after_the_copies(root):
    model, opt = make_model(3)
    train_step(model, opt, 0)
    with stint.Checkpointer(root, snapshot="eager") as ckpt:
        assert not ckpt.lazy
        expected = cpu_copy(state_of(model, opt))
        staged, durable = ckpt.save(1, state_of(model, opt))
        assert staged.done()
        with torch.no_grad():  # no barrier needed after an eager save
            for p in model.parameters():
                p.zero_()
            model[1].running_mean.fill_(7.0)
        durable.result(timeout=120)
        assert_same_state(expected, ckpt.load(map_location="cpu"), "eager")


@needs_cuda
def test_loads_onto_the_saved_device_and_in_place(root):
    model, opt = make_model(4)
    for i in range(2):
        train_step(model, opt, i)
    expected = cpu_copy(state_of(model, opt))
    with stint.Checkpointer(root) as ckpt:
        ckpt.attach(model, opt)
        ckpt.save(2, state_of(model, opt)).durable.result(timeout=120)
        ckpt.detach()
        # Fresh tensors go back to the device they were saved from.
        back = ckpt.load()
        assert back["model"]["0.weight"].device == torch.device("cuda", 0)
        assert back["optim"]["state"][0]["exp_avg"].device == torch.device("cuda", 0)
        assert_same_state(expected, back, "default")
        # In place into a fresh CUDA model (host-to-device on a copy stream).
        fresh, fresh_opt = make_model(5)
        target = fresh.state_dict()
        ptrs = {k: v.data_ptr() for k, v in target.items()}
        ckpt.load(into={"model": target})
        for k, v in fresh.state_dict().items():
            assert v.data_ptr() == ptrs[k], k
            assert v.is_cuda, k
        assert_same_state(expected["model"], cpu_copy(fresh.state_dict()), "in place")
        fresh_opt.load_state_dict(back["optim"])
        # Both continue alike.
        train_step(model, opt, 10)
        train_step(fresh, fresh_opt, 10)
        for a, b in zip(model.parameters(), fresh.parameters()):
            assert torch.allclose(a, b, rtol=1e-5, atol=1e-6)


@needs_cuda
def test_map_location_device_and_dict(root):
    model, opt = make_model(6)
    train_step(model, opt, 0)
    expected = cpu_copy(state_of(model, opt))
    with stint.Checkpointer(root) as ckpt:
        ckpt.save(1, state_of(model, opt)).durable.result(timeout=120)
        assert_same_state(expected, ckpt.load(map_location="cpu"), "cpu", devices="cpu")
        assert_same_state(expected, ckpt.load(map_location=torch.device("cpu")), "device",
                          devices="cpu")
        # A dict maps only the devices it names; the rest loads as saved
        # (the optimizer's step counters were CPU tensors).
        back = ckpt.load(map_location={"cuda:0": "cpu"})
        assert_same_state(expected, back, "dict", devices="cpu")
        back = ckpt.load(map_location={"cuda:7": "cpu"})
        assert back["model"]["0.weight"].device == torch.device("cuda", 0)
        assert_same_state(expected, back, "dict naming another device")
        # The Reader takes the same.
        r = stint.CheckpointReader(os.path.join(root, "step-%08d" % 1))
        assert_same_state(expected, r.state(map_location={"cuda:0": "cpu"}), "reader",
                          devices="cpu")


@needs_cuda
def test_saved_on_a_gpu_this_process_lacks(root, monkeypatch):
    """A checkpoint saved from cuda:0 loads where no GPU is visible (onto the
    CPU), never refused; the mapping for more devices is below."""
    model, opt = make_model(7)
    train_step(model, opt, 0)
    expected = cpu_copy(state_of(model, opt))
    with stint.Checkpointer(root) as ckpt:
        ckpt.save(1, state_of(model, opt)).durable.result(timeout=120)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
        monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
        back = ckpt.load()
    assert_same_state(expected, back, "no GPU", devices="cpu")


@pytest.mark.parametrize("gpus, saved, expect", [
    (0, "cuda:1", "cpu"),
    (1, "cuda:1", "cuda:0"),
    (1, "cuda:0", "cuda:0"),
    (2, "cuda:3", "cuda:1"),
    (2, "cuda:1", "cuda:1"),
    (4, "cuda", "cuda"),
    (0, "cpu", "cpu"),
])
def test_device_for_maps_missing_gpus(monkeypatch, gpus, saved, expect):
    """The rule load() applies to each fresh tensor (pytree._device_for): a GPU
    this process lacks maps to its index modulo the visible GPUs, or to the
    CPU without any. Runs without a GPU (device counts faked)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: gpus > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus)
    assert pytree._device_for(saved, None, "t", "here") == torch.device(expect)


def test_device_for_map_location(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    f = pytree._device_for
    assert f("cuda:1", "cpu", "t", "here") == torch.device("cpu")
    assert f("cuda:1", {"cuda:1": "cuda:0"}, "t", "here") == torch.device("cuda", 0)
    assert f("cuda:1", {"cuda:1": "cpu"}, "t", "here") == torch.device("cpu")
    # Not named in the dict: as saved, so mapped like any missing GPU.
    assert f("cuda:1", {"cuda:2": "cpu"}, "t", "here") == torch.device("cuda", 0)
    assert f(None, {"cuda:1": "cpu"}, "t", "here") is None  # a CPU tensor stays
    assert f(None, None, "t", "here") is None


def _rewrite_saved_device(monkeypatch, device):
    """Makes save() record `device` as every tensor's saved device, as if
    written by a process whose tensors were there (the bytes are the same)."""
    real = pytree.flatten

    def flatten(state):
        flat = real(state)

        def walk(node):
            if isinstance(node, list):
                if len(node) >= 2 and node[0] == "tensor" and isinstance(node[1], str):
                    meta = node[2] if len(node) > 2 and isinstance(node[2], dict) else {}
                    meta["device"] = device
                    node[2:] = [meta]
                    return
                for x in node:
                    walk(x)

        walk(flat.root)
        return flat

    monkeypatch.setattr(pytree, "flatten", flatten)


def test_checkpoint_from_cuda1_loads_with_fewer_gpus(root, monkeypatch):
    """End to end: tensors recorded as saved on cuda:1 load on this machine
    (the CPU without a GPU, cuda:0 with one) or where map_location says."""
    state = {"w": torch.randn(64, 32), "b": torch.arange(5)}
    with stint.Checkpointer(root, cuda=False) as ckpt:
        _rewrite_saved_device(monkeypatch, "cuda:1")
        ckpt.save(1, state).durable.result(timeout=60)
        monkeypatch.undo()
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        expect = torch.device("cpu") if count == 0 else torch.device("cuda", 1 % count)
        back = ckpt.load()
        for k in state:
            assert back[k].device == expect, k
            assert same_bits(state[k], back[k]), k
        back = ckpt.load(map_location={"cuda:1": "cpu"})
        assert all(back[k].device.type == "cpu" and same_bits(state[k], back[k]) for k in state)


@needs_2_gpus
def test_tensors_on_two_devices(root):
    torch.manual_seed(8)
    a = torch.nn.Linear(256, 256).to("cuda:0")
    b = torch.nn.Linear(256, 256).to("cuda:1")
    opt = torch.optim.AdamW(list(a.parameters()) + list(b.parameters()), lr=1e-3)

    def step(i):
        x = torch.randn(32, 256, generator=torch.Generator().manual_seed(i))
        opt.zero_grad()
        a(x.to("cuda:0")).pow(2).mean().backward()
        b(x.to("cuda:1")).pow(2).mean().backward()
        opt.step()

    step(0)
    with stint.Checkpointer(root) as ckpt:
        ckpt.attach(None, opt)
        state = {"a": a.state_dict(), "b": b.state_dict(), "optim": opt.state_dict()}
        expected = cpu_copy(state)
        ckpt.save(1, state)
        for i in range(1, 4):
            step(i)
        ckpt.flush()
        back = ckpt.load()
        assert back["a"]["weight"].device == torch.device("cuda", 0)
        assert back["b"]["weight"].device == torch.device("cuda", 1)
        assert_same_state(expected, back, "two devices")
        back = ckpt.load(map_location={"cuda:1": "cuda:0"})
        assert back["b"]["weight"].device == torch.device("cuda", 0)


@needs_cuda
def test_dtensor_local_shard_on_cuda(root, tmp_path):
    """A DTensor on a one-GPU mesh: its local shard is saved from CUDA and
    loads into a DTensor of the same mesh in place."""
    dist = pytest.importorskip("torch.distributed")
    if not dist.is_available():
        pytest.skip("torch.distributed unavailable")
    try:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor import Shard, distribute_tensor
    except ImportError:
        pytest.skip("no DTensor in this torch")
    dist.init_process_group("cpu:gloo,cuda:nccl", init_method="file://" + str(tmp_path / "pg"),
                            rank=0, world_size=1)
    try:
        mesh = init_device_mesh("cuda", (1,))
        full = torch.randn(64, 16, generator=torch.Generator().manual_seed(9))
        dt = distribute_tensor(full.to("cuda"), mesh, [Shard(0)])
        with stint.Checkpointer(root) as ckpt:
            ckpt.save(1, {"w": dt})
            with torch.no_grad():
                dt.to_local().add_(1.0)  # save() is eager without attach(): copied already
            ckpt.flush()
        target = distribute_tensor(torch.zeros(64, 16, device="cuda"), mesh, [Shard(0)])
        with stint.Checkpointer(root) as ckpt:
            ckpt.load(into={"w": target})
        assert target.to_local().is_cuda
        assert same_bits(full, target.full_tensor())
    finally:
        dist.destroy_process_group()
