"""The collective stint.Checkpointer with real processes (gloo on CPU).

Each test starts a small job: one subprocess per rank running this file as a
script (`python test_distributed_checkpoint.py SCENARIO RANK WORLD DIR`),
joined over a FileStore; every wait has a deadline and a job past it is
killed. The ranks check their own results and exit non-zero on failure; the
test shows their output.
"""

import datetime
import json
import os
import subprocess
import sys
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
JOB_DEADLINE = 150.0  # seconds for one job, start to finish (a 2-core machine, 4 processes)
SEED = 1234


# -- the parent side ------------------------------------------------------------------


def run_job(scenario, world, work, python_env, tag=None):
    """Runs `scenario` on `world` processes; returns after all exited 0."""
    tag = tag or "%s-%d" % (scenario, world)
    store = os.path.join(work, "store-" + tag)
    logs, procs = [], []
    for rank in range(world):
        log = open(os.path.join(work, "%s-rank%d.log" % (tag, rank)), "w+")
        logs.append(log)
        env = dict(python_env)
        env.update(OMP_NUM_THREADS="1", STINT_TEST_STORE=store)
        procs.append(subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), scenario, str(rank), str(world), work],
            stdout=log, stderr=subprocess.STDOUT, env=env, cwd=HERE))
    deadline = time.monotonic() + JOB_DEADLINE
    timed_out = False
    for p in procs:
        try:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            timed_out = True
            break
    if timed_out:
        for p in procs:
            if p.poll() is None:
                p.kill()
        for p in procs:
            p.wait(timeout=30)
    out = []
    for rank, (p, log) in enumerate(zip(procs, logs)):
        log.seek(0)
        out.append("---- rank %d (exit %s) ----\n%s" % (rank, p.returncode, log.read()[-6000:]))
        log.close()
    if timed_out or any(p.returncode != 0 for p in procs):
        pytest.fail("%s on %d processes %s:\n%s" % (
            scenario, world, "timed out after %.0f s" % JOB_DEADLINE if timed_out else "failed",
            "\n".join(out)))


@pytest.fixture(scope="module")
def saved(tmp_path_factory, request):
    """A 4-process job that saved an FSDP2 model + AdamW and a 2 x 2 mesh state."""
    import stint
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.dirname(os.path.dirname(stint.__file__)) + os.pathsep + \
        env.get("PYTHONPATH", "")
    work = str(tmp_path_factory.mktemp("dist"))
    run_job("save", 4, work, env)
    return work, env


@pytest.mark.parametrize("world", [2, 3, 1])
def test_fsdp2_saved_on_4_loads_on_other_world_sizes(saved, world):
    work, env = saved
    run_job("load_fsdp", world, work, env)


def test_2d_mesh_shards_load_on_1d_mesh_of_3(saved):
    work, env = saved
    run_job("load_mesh", 3, work, env)


def test_unservable_layout_is_refused_and_not_quarantined(saved):
    work, env = saved
    run_job("refuse", 2, work, env)


def test_mismatched_global_shape_fails_on_every_rank(tmp_path, python_env):
    run_job("mismatch", 2, str(tmp_path), python_env)


# -- the rank side --------------------------------------------------------------------


def _init(rank, world):
    import torch.distributed as dist
    dist.init_process_group("gloo", init_method="file://" + os.environ["STINT_TEST_STORE"],
                            rank=rank, world_size=world, timeout=datetime.timedelta(seconds=60))


def _model():
    import torch
    torch.manual_seed(SEED)
    # Odd sizes: 4 ranks shard 13 rows unevenly (4, 4, 4, 1), 3 ranks (5, 5, 3).
    return torch.nn.Sequential(torch.nn.Linear(6, 13), torch.nn.ReLU(), torch.nn.Linear(13, 3))


def _fsdp(world):
    import torch
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    model = _model()
    mesh = init_device_mesh("cpu", (world,))
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    opt = torch.optim.AdamW(model.parameters(), lr=0.01, weight_decay=0.1)
    return model, opt


def _train_step(model, opt, rank, step):
    import torch
    g = torch.Generator().manual_seed(1000 * step + rank)
    x = torch.randn(8, 6, generator=g)
    loss = model(x).square().mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
    return loss.item()


def _full(x):
    from torch.distributed.tensor import DTensor
    return x.full_tensor() if isinstance(x, DTensor) else x


def _full_tree(x):
    import torch
    if isinstance(x, torch.Tensor):
        return _full(x).detach().clone()
    if isinstance(x, dict):
        return {k: _full_tree(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return type(x)(_full_tree(v) for v in x)
    return x


def _compare(got, want, path="state"):
    import torch
    from util import same_bits
    if isinstance(want, torch.Tensor):
        assert isinstance(got, torch.Tensor), "%s: %r" % (path, type(got))
        assert same_bits(_full(got), want), "%s: differs\n%s\n%s" % (path, _full(got), want)
    elif isinstance(want, dict):
        assert sorted(map(str, got)) == sorted(map(str, want)), "%s: keys %s vs %s" % (
            path, sorted(map(str, got)), sorted(map(str, want)))
        for k in want:
            _compare(got[k], want[k], "%s[%r]" % (path, k))
    elif isinstance(want, (list, tuple)):
        assert len(got) == len(want), path
        for i, (a, b) in enumerate(zip(got, want)):
            _compare(a, b, "%s[%d]" % (path, i))
    else:
        assert got == want, "%s: %r vs %r" % (path, got, want)


def _mesh_state(mesh, rank):
    """Full tensors and their 2 x 2 (or any) mesh DTensors: Shard(0) x Shard(1),
    Shard(0) x Replicate(), Replicate() x Shard(1) with uneven columns."""
    import torch
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor
    g = torch.Generator().manual_seed(SEED)
    full = {
        "a": torch.randn(6, 8, generator=g),
        "b": torch.randn(5, 3, generator=g).to(torch.float64),
        "c": torch.arange(7 * 5, dtype=torch.int32).reshape(7, 5),
    }
    placements = {
        "a": [Shard(0), Shard(1)],
        "b": [Shard(0), Replicate()],
        "c": [Replicate(), Shard(1)],
    }
    return full, {k: distribute_tensor(full[k], mesh, placements[k]) for k in full}


def rank_save(rank, world, work):
    import torch
    import torch.distributed as dist
    from torch.distributed.checkpoint.state_dict import get_state_dict
    from torch.distributed.device_mesh import init_device_mesh
    import stint
    _init(rank, world)
    model, opt = _fsdp(world)
    for step in range(2):
        _train_step(model, opt, rank, step)
    msd, osd = get_state_dict(model, opt)
    state = {"model": msd, "optim": osd, "rank": rank, "note": b"from rank %d" % rank}
    ckpt = stint.Checkpointer(os.path.join(work, "fsdp"), commit_timeout=60.0)
    assert ckpt.root
    staged, durable = ckpt.save(2, state)
    durable.result(timeout=90)
    ref = _full_tree({"model": msd, "optim": osd})
    if rank == 0:
        torch.save(ref, os.path.join(work, "fsdp-ref.pt"))
    ckpt.close()

    mesh = init_device_mesh("cpu", (2, 2))
    full, dts = _mesh_state(mesh, rank)
    with stint.Checkpointer(os.path.join(work, "mesh"), commit_timeout=60.0) as ck:
        _, durable = ck.save(5, {"t": dts, "plain": torch.full((3,), 7.0), "step": 5})
        durable.result(timeout=90)
    # The same checkpoint loads back on the same layout.
    _, fresh = _mesh_state(mesh, rank)
    for t in fresh.values():
        t._local_tensor.zero_()
    with stint.Checkpointer(os.path.join(work, "mesh")) as ck:
        back = ck.load(into={"t": fresh})
    _compare(back["t"], full)
    assert back["t"]["a"] is fresh["a"]
    assert back["step"] == 5
    dist.barrier()
    dist.destroy_process_group()


def rank_load_fsdp(rank, world, work):
    import torch
    import torch.distributed as dist
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
    import stint
    _init(rank, world)
    ref = torch.load(os.path.join(work, "fsdp-ref.pt"))
    model, opt = _fsdp(world)
    msd, osd = get_state_dict(model, opt)  # initialises AdamW's state (exp_avg, ...)
    state = {"model": msd, "optim": osd}
    with stint.Checkpointer(os.path.join(work, "fsdp"), commit_timeout=60.0) as ck:
        r = ck.load_result(into=state)
        assert r.step == 2, r
        # Every rank of the saving job kept its own plain leaves.
        assert r.state["rank"] == rank and r.state["note"] == b"from rank %d" % rank, r.state
        set_state_dict(model, opt, model_state_dict=msd, optim_state_dict=osd)
        msd2, osd2 = get_state_dict(model, opt)
        _compare(_full_tree({"model": msd2, "optim": osd2}), ref)
        # Training continues from the loaded state.
        before = {k: _full(v).clone() for k, v in model.state_dict().items()}
        loss = _train_step(model, opt, rank, 2)
        assert loss == loss
        after = {k: _full(v) for k, v in model.state_dict().items()}
        assert any(not torch.equal(before[k], after[k]) for k in before)
        # Without `into`: full plain tensors.
        plain = ck.load()
        _compare(plain["model"], ref["model"])
        _compare(plain["optim"], ref["optim"])
        assert not any(isinstance(v, torch.distributed.tensor.DTensor) for v in plain["model"].values())
    dist.barrier()
    dist.destroy_process_group()


def rank_load_mesh(rank, world, work):
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor
    import stint
    _init(rank, world)
    mesh = init_device_mesh("cpu", (world,))
    g = torch.Generator().manual_seed(SEED)
    full = {
        "a": torch.randn(6, 8, generator=g),
        "b": torch.randn(5, 3, generator=g).to(torch.float64),
        "c": torch.arange(7 * 5, dtype=torch.int32).reshape(7, 5),
    }
    placements = {"a": [Shard(1)], "b": [Shard(0)], "c": [Replicate()]}
    into = {k: distribute_tensor(torch.zeros_like(v), mesh, placements[k]) for k, v in full.items()}
    plain = torch.zeros(3)
    with stint.Checkpointer(os.path.join(work, "mesh"), commit_timeout=60.0) as ck:
        back = ck.load(into={"t": into, "plain": plain})
    _compare(back["t"], full)
    for k in full:
        assert back["t"][k] is into[k]
    assert torch.equal(plain, torch.full((3,), 7.0)) and back["plain"] is plain
    assert back["step"] == 5
    dist.barrier()
    dist.destroy_process_group()


def rank_refuse(rank, world, work):
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor
    import stint
    _init(rank, world)
    mesh = init_device_mesh("cpu", (world,))
    root = os.path.join(work, "mesh")
    steps = stint.Checkpointer(root).list_committed()  # collective over the default group
    with stint.Checkpointer(root) as ck:
        # A tensor the checkpoint lacks.
        missing = {"t": {"zzz": distribute_tensor(torch.zeros(4, 4), mesh, [Shard(0)])}}
        with pytest.raises(stint.NotFoundError, match="zzz"):
            ck.load(into=missing)
        # A DTensor whose global shape is not the saved one.
        wrong = {"t": {"a": distribute_tensor(torch.zeros(6, 9), mesh, [Shard(0)])}}
        with pytest.raises(stint.InvalidArgumentError, match="'t.a'"):
            ck.load(into=wrong, strict=False)
        assert ck.list_committed() == steps == [5]
        assert not [n for n in os.listdir(root) if "quarantine" in n]
        # The checkpoint still loads.
        assert ck.load()["step"] == 5
    dist.barrier()
    dist.destroy_process_group()


def rank_mismatch(rank, world, work):
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Shard
    import stint
    _init(rank, world)
    mesh = init_device_mesh("cpu", (world,))
    # Rank 1 claims a global shape of 9 rows, rank 0 of 8.
    rows = 8 + rank
    local = torch.ones(4, 3)
    dt = DTensor.from_local(local, mesh, [Shard(0)], run_check=False, shape=torch.Size([rows, 3]),
                            stride=(3, 1))
    with stint.Checkpointer(os.path.join(work, "bad"), commit_timeout=30.0) as ck:
        try:
            _, durable = ck.save(1, {"w": dt})
            durable.result(timeout=60)
        except stint.InvalidArgumentError as e:
            assert "w" in str(e), e
        else:
            raise AssertionError("rank %d: the save committed" % rank)
        assert ck.list_committed() == []
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    scenario, rank, world, work = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    sys.path.insert(0, HERE)
    globals()["rank_" + scenario](rank, world, work)
    print("rank %d: %s ok" % (rank, scenario), flush=True)
