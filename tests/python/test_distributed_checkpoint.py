"""The collective stint.Checkpointer with real processes (gloo on CPU).

A job is one subprocess per rank running this file as a script
(`python test_distributed_checkpoint.py JOB RANK WORLD DIR`), joined over a
FileStore: a 4-process job saves (FSDP2 + AdamW, a 2 x 2 mesh, subgroups, a
bad layout), then load jobs on 2, 3 and 1 processes read it back. Each rank
runs the parts of its job in order and leaves a marker per part (.ok, or .err
with the traceback); the tests check the markers. Every wait has a deadline:
the process group's timeout inside a job, JOB_DEADLINE for a whole job.
"""

import datetime
import os
import subprocess
import sys
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
JOB_DEADLINE = 150.0  # seconds for one job, start to finish (a 2-core machine, 4 processes)
SEED = 1234


# -- the parent side ------------------------------------------------------------------

# What each job runs, in order, on every rank: one process start (torch import
# included) is the dominant cost, so each job checks several things. A part
# that fails writes its traceback and the job goes on with the next part.
JOBS = {
    "save": ["fsdp_save", "mesh_save", "subgroups", "mismatch", "fsdp_incremental"],
    "load": {2: ["fsdp_load"], 3: ["fsdp_load", "mesh_load", "refuse"], 1: ["fsdp_load"]},
}


def run_job(job, world, work, python_env, script=__file__):
    """Runs `job` on `world` processes (`script JOB RANK WORLD DIR`), each past
    its deadline killed; fails when a process did not exit 0 (parts report
    through markers)."""
    tag = "%s-%d" % (job, world)
    store = os.path.join(work, "store-" + tag)
    logs, procs = [], []
    for rank in range(world):
        log = open(os.path.join(work, "%s-rank%d.log" % (tag, rank)), "w+")
        logs.append(log)
        env = dict(python_env)
        env.update(OMP_NUM_THREADS="1", STINT_TEST_STORE=store)
        procs.append(subprocess.Popen(
            [sys.executable, os.path.abspath(script), job, str(rank), str(world), work],
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
        pytest.fail("job %s on %d processes %s:\n%s" % (
            job, world, "timed out after %.0f s" % JOB_DEADLINE if timed_out else "failed",
            "\n".join(out)))


def check_part(work, part, world):
    """Fails with the ranks' tracebacks unless every rank passed `part`."""
    errors = []
    for rank in range(world):
        base = os.path.join(work, "%s-%d-rank%d" % (part, world, rank))
        if os.path.exists(base + ".err"):
            with open(base + ".err") as f:
                errors.append("---- rank %d ----\n%s" % (rank, f.read()))
        elif not os.path.exists(base + ".ok"):
            errors.append("---- rank %d: did not run ----" % rank)
    if errors:
        pytest.fail("%s on %d processes:\n%s" % (part, world, "\n".join(errors)))


@pytest.fixture(scope="module")
def jobs(tmp_path_factory):
    """run(world): the 4-process save job once, then the load job on `world`
    processes once; returns the shared work directory."""
    import stint
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.dirname(os.path.dirname(stint.__file__)) + os.pathsep + \
        env.get("PYTHONPATH", "")
    env.pop("STINT_GRACE_SECONDS", None)
    work = str(tmp_path_factory.mktemp("dist"))
    done = set()

    def run(world=None):
        if "save" not in done:
            done.add("save")
            run_job("save", 4, work, env)
        if world is not None and world not in done:
            done.add(world)
            run_job("load", world, work, env)
        return work

    return run


@pytest.mark.parametrize("world", [2, 3, 1])
def test_fsdp2_saved_on_4_loads_on_other_world_sizes(jobs, world):
    """FSDP2 + AdamW on 4 processes; loaded on `world`: parameters and optimizer
    state bit for bit, one more training step works, load() gives full tensors."""
    work = jobs(world)
    check_part(work, "fsdp_save", 4)
    check_part(work, "fsdp_load", world)


def test_2d_mesh_shards_load_on_1d_mesh_of_3(jobs):
    work = jobs(3)
    check_part(work, "mesh_save", 4)
    check_part(work, "mesh_load", 3)


def test_unservable_layout_is_refused_and_not_quarantined(jobs):
    work = jobs(3)
    check_part(work, "refuse", 3)


def test_mismatched_global_shape_fails_on_every_rank(jobs):
    check_part(jobs(), "mismatch", 4)


def test_incremental_fsdp2_saves_reference_each_ranks_own_previous_files(jobs):
    check_part(jobs(), "fsdp_incremental", 4)


def test_subgroups_checkpoint_over_their_own_store(jobs):
    check_part(jobs(), "subgroups", 4)


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


def _mesh_full():
    import torch
    g = torch.Generator().manual_seed(SEED)
    return {
        "a": torch.randn(6, 8, generator=g),
        "b": torch.randn(5, 3, generator=g).to(torch.float64),
        "c": torch.arange(7 * 5, dtype=torch.int32).reshape(7, 5),
        "d": torch.randn(8, 3, generator=g).to(torch.bfloat16),
    }


def _mesh_state(mesh, rank):
    """Full tensors and their DTensors on a 2 x 2 mesh: Shard(0) x Shard(1),
    Shard(0) x Replicate(), Replicate() x Shard(1) with uneven columns, and
    rows split over the second mesh dim first, then the first (2-D FSDP over
    TP: _StridedShard(0, split_factor=2) x Shard(0))."""
    import torch
    from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_tensor
    from torch.distributed.tensor.placement_types import _StridedShard
    full = _mesh_full()
    placements = {
        "a": [Shard(0), Shard(1)],
        "b": [Shard(0), Replicate()],
        "c": [Replicate(), Shard(1)],
    }
    dts = {k: distribute_tensor(full[k], mesh, placements[k]) for k in placements}
    i, j = mesh.get_coordinate()
    local = full["d"][4 * j + 2 * i:4 * j + 2 * i + 2].clone()
    dts["d"] = DTensor.from_local(local, mesh, [_StridedShard(0, split_factor=2), Shard(0)],
                                  run_check=False, shape=full["d"].shape, stride=(3, 1))
    assert torch.equal(dts["d"].full_tensor(), full["d"])  # the layout is what we think
    return full, dts


def rank_fsdp_save(rank, world, work):
    import torch
    from torch.distributed.checkpoint.state_dict import get_state_dict
    import stint
    model, opt = _fsdp(world)
    for step in range(2):
        _train_step(model, opt, rank, step)
    msd, osd = get_state_dict(model, opt)
    state = {"model": msd, "optim": osd, "rank": rank, "note": b"from rank %d" % rank}
    ckpt = stint.Checkpointer(os.path.join(work, "fsdp"), commit_timeout=60.0)
    assert ckpt.collective and (ckpt.rank, ckpt.world_size) == (rank, world)
    staged, durable = ckpt.save(2, state)
    durable.result(timeout=90)
    ref = _full_tree({"model": msd, "optim": osd})
    if rank == 0:
        torch.save(ref, os.path.join(work, "fsdp-ref.pt"))
    ckpt.close()


def rank_fsdp_incremental(rank, world, work):
    """FSDP2 with a frozen first layer and AdamW, incremental=True: the
    second save writes only what training changed, each rank's chunks
    reference that rank's own file of the first save, and both steps load
    back bit for bit."""
    import json
    import torch
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
    import stint
    model, opt = _fsdp(world)
    model[0].weight.requires_grad_(False)
    model[0].bias.requires_grad_(False)
    root = os.path.join(work, "fsdp-incr")
    refs = []
    with stint.Checkpointer(root, commit_timeout=60.0, incremental=True, keep_last=1) as ck:
        for step in (1, 2):
            _train_step(model, opt, rank, step)
            msd, osd = get_state_dict(model, opt)
            refs.append(_full_tree({"model": msd, "optim": osd}))
            _, durable = ck.save(step, {"model": msd, "optim": osd},
                                 frozen=lambda name, t: name.startswith("model.0."))
            durable.result(timeout=90)
            last = ck.stats()["last"]
            if step == 1:
                assert last["referenced_bytes"] == 0, last
            elif model[0].weight.to_local().numel() > 0:  # rank 3 may hold no rows
                assert last["referenced_bytes"] >= model[0].weight.to_local().nbytes, last
        # keep_last=1, yet step 1 stays: step 2 references it.
        ck.flush()  # retention runs after a save is durable
        assert ck.list_committed() == [1, 2], ck.list_committed()
        with open(os.path.join(root, "step-00000002", "MANIFEST.json")) as f:
            manifest = json.load(f)["manifest"]
        mine = "rank-%05d.stint" % rank
        for t in manifest["tensors"]:
            for shard in t["shards"]:
                if shard["file"] != mine:
                    continue
                for c in shard["chunks"]:
                    assert c.get("ref", "step-00000001/" + mine) == "step-00000001/" + mine, c
        for step, want in ((2, refs[1]), (1, refs[0])):
            fresh, fopt = _fsdp(world)
            fresh[0].weight.requires_grad_(False)
            fresh[0].bias.requires_grad_(False)
            fm, fo = get_state_dict(fresh, fopt)
            state = {"model": fm, "optim": fo}
            ck.load(into=state, step=step)
            set_state_dict(fresh, fopt, model_state_dict=fm, optim_state_dict=fo)
            m2, o2 = get_state_dict(fresh, fopt)
            _compare(_full_tree({"model": m2, "optim": o2}), want)


def rank_mesh_save(rank, world, work):
    import torch
    from torch.distributed.device_mesh import init_device_mesh
    import stint
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


def rank_subgroups(rank, world, work):
    import torch
    from torch.distributed.device_mesh import init_device_mesh
    import stint
    # Two subgroups, {0, 1} and {2, 3} (the "s" dim of a 2 x 2 mesh), each a
    # collective checkpointer of its own over its own store.
    from torch.distributed.tensor import Shard, distribute_tensor
    mesh2d = init_device_mesh("cpu", (2, 2), mesh_dim_names=("g", "s"))
    mine = mesh2d.get_group("s")
    base = torch.arange(12.0).reshape(4, 3) + 100 * (rank // 2)
    sub = {"w": distribute_tensor(base.clone(), mesh2d["s"], [Shard(0)]), "who": rank}
    sub_root = os.path.join(work, "group%d" % (rank // 2))
    with stint.Checkpointer(sub_root, process_group=mine, commit_timeout=60.0) as ck:
        assert ck.rank == rank % 2 and ck.world_size == 2
        _, durable = ck.save(3, sub)
        durable.result(timeout=90)
        sub["w"]._local_tensor.zero_()
        back = ck.load(into=sub)
    _compare(back["w"], base)
    assert back["who"] == rank


def rank_fsdp_load(rank, world, work):
    import torch
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
    import stint
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
        # Straight into the parameters of another FSDP2 model: its state_dict()
        # DTensors share storage with the sharded parameters.
        model2, _ = _fsdp(world)
        ck.load(into={"model": model2.state_dict()}, strict=False)
        _compare(_full_tree(model2.state_dict()), ref["model"])
        # Without `into`: full plain tensors.
        plain = ck.load()
        _compare(plain["model"], ref["model"])
        _compare(plain["optim"], ref["optim"])
        assert not any(isinstance(v, torch.distributed.tensor.DTensor) for v in plain["model"].values())


def rank_mesh_load(rank, world, work):
    import torch
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor
    import stint
    mesh = init_device_mesh("cpu", (world,))
    full = _mesh_full()
    placements = {"a": [Shard(1)], "b": [Shard(0)], "c": [Replicate()], "d": [Shard(0)]}
    into = {k: distribute_tensor(torch.zeros_like(v), mesh, placements[k]) for k, v in full.items()}
    plain = torch.zeros(3)
    with stint.Checkpointer(os.path.join(work, "mesh"), commit_timeout=60.0) as ck:
        back = ck.load(into={"t": into, "plain": plain})
    _compare(back["t"], full)
    for k in full:
        assert back["t"][k] is into[k]
    assert torch.equal(plain, torch.full((3,), 7.0)) and back["plain"] is plain
    assert back["step"] == 5


def rank_refuse(rank, world, work):
    import torch
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor
    import stint
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


def rank_mismatch(rank, world, work):
    import torch
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Shard
    import stint
    mesh = init_device_mesh("cpu", (world,))
    # Every rank's DTensor is consistent in itself, but rank 1 says the
    # tensor has 4 columns where the others say 3.
    cols = 4 if rank == 1 else 3
    dt = DTensor.from_local(torch.ones(4, cols), mesh, [Shard(0)], run_check=False,
                            shape=torch.Size([4 * world, cols]), stride=(cols, 1))
    with stint.Checkpointer(os.path.join(work, "bad"), commit_timeout=30.0) as ck:
        try:
            _, durable = ck.save(1, {"w": dt})
            durable.result(timeout=60)
        except stint.InvalidArgumentError as e:
            assert "w" in str(e), e
        else:
            raise AssertionError("rank %d: the save committed" % rank)
        assert ck.list_committed() == []


def main(job, rank, world, work, jobs=JOBS, parts_in=None):
    """Runs this rank's parts of `job` (from `jobs`; each part's function
    rank_<part> is looked up in `parts_in`, default this module)."""
    import traceback
    import torch.distributed as dist
    sys.path.insert(0, HERE)
    _init(rank, world)
    parts = jobs[job] if job == "save" else jobs[job][world]
    for part in parts:
        base = os.path.join(work, "%s-%d-rank%d" % (part, world, rank))
        try:
            (parts_in or globals())["rank_" + part](rank, world, work)
        except BaseException:
            with open(base + ".err", "w") as f:
                f.write(traceback.format_exc())
            print("rank %d: %s FAILED\n%s" % (rank, part, traceback.format_exc()), flush=True)
        else:
            open(base + ".ok", "w").close()
            print("rank %d: %s ok" % (rank, part), flush=True)
        dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    from util import run_and_exit
    run_and_exit(main, sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
