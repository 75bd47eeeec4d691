"""stint.dcp: torch.distributed.checkpoint's save/async_save/load through stint storage.

The multi-process tests run this file as a worker script (`python test_dcp.py
<phase>` with RANK/WORLD_SIZE/... in the environment): FSDP2 on Gloo/CPU,
every wait bounded by a subprocess timeout.
"""

import glob
import os
import sys
import time
import warnings

import pytest
import torch

import torch.distributed.checkpoint as dcp

from util import root_entries

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER_TIMEOUT = 180  # seconds per multi-process phase, start-up included (2 loaded cores)


# ---- the model both sides use ------------------------------------------------------

def _model():
    torch.manual_seed(1234)
    # 5 and 7 rows: uneven shards over 2 and 3 ranks.
    return torch.nn.Sequential(torch.nn.Linear(6, 7), torch.nn.ReLU(), torch.nn.Linear(7, 5))


def _train(model, opt, steps, seed):
    g = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        x = torch.randn(4, 6, generator=g)
        model(x).square().mean().backward()
        opt.step()
        opt.zero_grad()


def _full_state(model, opt):
    """Every parameter and optimizer state as full plain tensors (a collective under FSDP2)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict
    msd, osd = get_state_dict(model, opt, options=StateDictOptions(full_state_dict=True))
    return {"model": msd, "optim": osd}


# ---- worker (run as a script, one process per rank) -------------------------------------

def _worker(phase):
    import torch.distributed as dist
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    from torch.distributed.checkpoint.state_dict_saver import AsyncCheckpointerType

    import stint.dcp

    warnings.simplefilter("ignore")
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    root, out = os.environ["DCP_ROOT"], os.environ["DCP_OUT"]
    distributed = world > 1 or phase != "load_plain"
    if distributed:
        dist.init_process_group("gloo", init_method="file://" + os.environ["DCP_INIT"],
                                rank=rank, world_size=world)
    model = _model()
    if distributed:
        fully_shard(model, mesh=init_device_mesh("cpu", (world,)))
    opt = torch.optim.AdamW(model.parameters(), lr=0.01)

    def state():
        msd, osd = get_state_dict(model, opt)
        return {"model": msd, "optim": osd, "meta": {"epoch": 7, "tag": "dcp"}}

    def dump(name):
        full = _full_state(model, opt) if distributed else {"model": model.state_dict(),
                                                            "optim": opt.state_dict()}
        if rank == 0:
            torch.save(full, os.path.join(out, name))

    if phase == "save":
        _train(model, opt, 2, seed=1)
        dcp.save(state(), storage_writer=stint.dcp.StorageWriter(root, commit_timeout=60))
        dump("step0.pt")
        _train(model, opt, 1, seed=2)
        # async_save (thread) on its own group: training goes on (with its own
        # collectives on the default group) while it persists.
        ckpt_group = dist.new_group(backend="gloo")
        fut = dcp.async_save(state(), storage_writer=stint.dcp.StorageWriter(root, timeout=60),
                             process_group=ckpt_group)
        dump("step1.pt")
        _train(model, opt, 1, seed=3)
        fut.result(timeout=60)
        fut = dcp.async_save(state(), storage_writer=stint.dcp.StorageWriter(root),
                             process_group=ckpt_group,
                             async_checkpointer_type=AsyncCheckpointerType.PROCESS)
        dump("step2.pt")
        fut.result(timeout=90)
        # Back to step 0 (checkpoint_id as "<root>/step-N"), then the newest.
        _train(model, opt, 1, seed=4)
        sd = state()
        dcp.load(sd, checkpoint_id=os.path.join(root, "step-00000000"),
                 storage_reader=stint.dcp.StorageReader(root))
        set_state_dict(model, opt, model_state_dict=sd["model"], optim_state_dict=sd["optim"])
        dump("loaded0.pt")
        sd = state()
        sd["meta"] = {"epoch": 0, "tag": ""}
        dcp.load(sd, storage_reader=stint.dcp.StorageReader(root))
        set_state_dict(model, opt, model_state_dict=sd["model"], optim_state_dict=sd["optim"])
        assert sd["meta"] == {"epoch": 7, "tag": "dcp"}, sd["meta"]
        dump("loaded2.pt")
    elif phase == "load_damaged":
        from stint import _C
        try:
            dcp.load(state(), storage_reader=stint.dcp.StorageReader(root, commit_timeout=30))
        except BaseException as e:  # DCP raises a CheckpointException (a BaseException)
            errors = stint.dcp.stint_errors(e)
            assert errors and all(isinstance(x, _C.DataLossError) for x in errors), repr(e)
        else:
            raise AssertionError("rank %d loaded a damaged checkpoint" % rank)
    elif phase in ("load", "load_plain"):
        _train(model, opt, 1, seed=9)  # optimizer state to be overwritten
        sd = state()
        dcp.load(sd, storage_reader=stint.dcp.StorageReader(root, step=int(os.environ["DCP_STEP"])))
        set_state_dict(model, opt, model_state_dict=sd["model"], optim_state_dict=sd["optim"])
        dump("loaded_%s_%d.pt" % (phase, world))
        _train(model, opt, 1, seed=5)  # training continues
    if distributed:
        dist.barrier()
        dist.destroy_process_group()


def _run_ranks(phase, world, root, tmp_path, python_env, step=0):
    """Runs `phase` on `world` processes; fails with their output if one fails or hangs."""
    from util import run_ranks
    env = dict(python_env, DCP_ROOT=root, DCP_OUT=str(tmp_path), DCP_STEP=str(step),
               DCP_INIT=str(tmp_path / ("init-%s-%d" % (phase, world))),
               DCP_STACKS_AFTER=str(WORKER_TIMEOUT - 10),
               MASTER_ADDR="127.0.0.1", OMP_NUM_THREADS="1")
    run_ranks(__file__, [phase], world, env, tmp_path, "%s-%d" % (phase, world), WORKER_TIMEOUT)


def _assert_same(a, b):
    from util import assert_same_tree
    assert_same_tree(a, b)


def _load(path):
    return torch.load(path, weights_only=False)


# ---- tests ------------------------------------------------------------------------

@pytest.fixture(scope="module")
def fsdp_run(tmp_path_factory):
    """One 2-rank FSDP2 run: dcp.save, async_save (thread and process), dcp.load twice."""
    import stint  # noqa: F401  (the conftest's stint, for the children's PYTHONPATH)
    tmp = tmp_path_factory.mktemp("fsdp")
    root = str(tmp / "ckpt")
    env = dict(os.environ)
    pkg_parent = os.path.dirname(os.path.dirname(stint.__file__))
    env["PYTHONPATH"] = os.pathsep.join([pkg_parent, HERE, env.get("PYTHONPATH", "")])
    _run_ranks("save", 2, root, tmp, env)
    return root, tmp, env


def test_fsdp2_save_async_save_and_load_round_trip_bit_for_bit(fsdp_run):
    _, tmp, _ = fsdp_run
    step0, step2 = _load(tmp / "step0.pt"), _load(tmp / "step2.pt")
    assert not torch.equal(step0["model"]["0.weight"], step2["model"]["0.weight"])
    _assert_same(_load(tmp / "loaded0.pt"), step0)
    _assert_same(_load(tmp / "loaded2.pt"), step2)


def test_fsdp2_checkpoints_are_normal_stint_checkpoints(fsdp_run):
    from stint import _C
    root, _, _ = fsdp_run
    names = root_entries(root)
    assert names == [".writer.lock", "LATEST", "step-00000000", "step-00000001",
                     "step-00000002"], names
    with open(os.path.join(root, "LATEST")) as f:
        assert f.read().strip() == "step-00000002"
    for step in names[2:]:
        reader = _C.CheckpointReader.open(os.path.join(root, step))
        assert reader.world_size == 2
        assert reader.verify()["chunks"] > 0
        infos = {t["name"]: t for t in reader.tensors()}
        # An FSDP2 parameter: one box per rank, dim 0 split unevenly (7 rows: 4 + 3).
        boxes = sorted((b["offsets"], b["extents"]) for b in infos["model.0.weight"]["shard_boxes"])
        assert boxes == [((0, 0), (4, 6)), ((4, 0), (3, 6))], boxes
        assert infos["optim.state.0.weight.exp_avg"]["shape"] == (7, 6)


def test_fsdp2_checkpoint_saved_on_2_ranks_loads_on_3(fsdp_run):
    root, tmp, env = fsdp_run
    _run_ranks("load", 3, root, tmp, env, step=1)
    _assert_same(_load(tmp / "loaded_load_3.pt"), _load(tmp / "step1.pt"))


def test_multi_rank_checkpoint_loads_into_one_process_without_a_group(fsdp_run):
    root, tmp, env = fsdp_run
    _run_ranks("load_plain", 1, root, tmp, env, step=2)
    loaded, saved = _load(tmp / "loaded_load_plain_1.pt"), _load(tmp / "step2.pt")
    _assert_same(dict(loaded["model"]), dict(saved["model"]))
    for i, name in enumerate(["0.weight", "0.bias", "2.weight", "2.bias"]):
        for key in ("exp_avg", "exp_avg_sq", "step"):
            _assert_same(loaded["optim"]["state"][i][key], saved["optim"]["state"][name][key])


def test_damaged_chunk_of_one_rank_fails_the_load_on_every_rank(fsdp_run, tmp_path):
    import shutil
    root, _, env = fsdp_run
    damaged = str(tmp_path / "damaged")
    os.makedirs(damaged)
    shutil.copytree(os.path.join(root, "step-00000000"), os.path.join(damaged, "step-00000000"))
    # Rank 1's file: the first byte of every 4 KiB block (every chunk starts on one).
    path = os.path.join(damaged, "step-00000000", "rank-00001.stint")
    with open(path, "r+b") as f:
        data = bytearray(f.read())
        for off in range(0, len(data), 4096):
            data[off] ^= 0x5A
        f.seek(0)
        f.write(bytes(data))
    _run_ranks("load_damaged", 2, damaged, tmp_path, env)


def _plain_state():
    model = _model()
    opt = torch.optim.AdamW(model.parameters(), lr=0.01)
    _train(model, opt, 2, seed=1)
    return model, opt, {"model": model.state_dict(), "optim": opt.state_dict(),
                        "meta": {"epoch": 3, "name": "single"}, "scalar": torch.tensor(-0.0)}


def test_single_process_save_and_load(root):
    import stint.dcp
    from stint import _C
    warnings.simplefilter("ignore")
    model, opt, sd = _plain_state()
    dcp.save(sd, storage_writer=stint.dcp.StorageWriter(root, keep_last=2))
    dcp.save(sd, storage_writer=stint.dcp.StorageWriter(root, keep_last=2))
    writer = stint.dcp.StorageWriter(root, keep_last=2)
    dcp.save(sd, storage_writer=writer)
    assert writer.last_step == 2
    assert root_entries(root) == [".writer.lock", "LATEST", "step-00000001",
                                        "step-00000002"]
    _C.CheckpointReader.open(os.path.join(root, "step-00000002")).verify()

    model2 = torch.nn.Sequential(torch.nn.Linear(6, 7), torch.nn.ReLU(), torch.nn.Linear(7, 5))
    opt2 = torch.optim.AdamW(model2.parameters(), lr=0.5)
    _train(model2, opt2, 1, seed=7)
    sd2 = {"model": model2.state_dict(), "optim": opt2.state_dict(),
           "meta": {"epoch": 0, "name": ""}, "scalar": torch.tensor(1.0)}
    dcp.load(sd2, storage_reader=stint.dcp.StorageReader(root))
    opt2.load_state_dict(sd2["optim"])
    _assert_same(model2.state_dict(), model.state_dict())
    _assert_same(opt2.state_dict(), opt.state_dict())
    assert sd2["meta"] == {"epoch": 3, "name": "single"}
    _assert_same(sd2["scalar"], torch.tensor(-0.0))

    # The Metadata DCP gets is rebuilt from the manifest, with the planner's key paths.
    metadata = stint.dcp.StorageReader(root).read_metadata()
    exp_avg = metadata.state_dict_metadata["optim.state.0.exp_avg"]
    assert exp_avg.size == torch.Size([7, 6]) and exp_avg.properties.dtype == torch.float32
    assert [(c.offsets, c.sizes) for c in exp_avg.chunks] == [((0, 0), (7, 6))]
    assert metadata.planner_data["optim.state.0.exp_avg"] == ("optim", "state", "0", "exp_avg")
    assert metadata.planner_data["meta.name"] == ("meta", "name")
    assert "__stint_dcp__/planner_data.json" in _C.CheckpointReader.open(
        os.path.join(root, "step-00000002")).blob_names()
    assert "__stint_dcp__/planner_data.json" not in metadata.state_dict_metadata
    assert type(metadata.state_dict_metadata["meta.name"]).__name__ == "BytesStorageMetadata"


def test_checkpoint_id_selects_the_step(root):
    import stint.dcp
    warnings.simplefilter("ignore")
    first = {"w": torch.arange(6.0).reshape(2, 3)}
    dcp.save(first, storage_writer=stint.dcp.StorageWriter(root), checkpoint_id=5)
    dcp.save({"w": first["w"] * 2}, storage_writer=stint.dcp.StorageWriter(root))
    assert root_entries(root) == [".writer.lock", "LATEST", "step-00000005",
                                        "step-00000006"]
    out = {"w": torch.zeros(2, 3)}
    dcp.load(out, storage_reader=stint.dcp.StorageReader("/nonexistent"),
             checkpoint_id=os.path.join(root, "step-5"))
    assert torch.equal(out["w"], first["w"])
    dcp.load(out, storage_reader=stint.dcp.StorageReader(root))
    assert torch.equal(out["w"], first["w"] * 2)
    assert stint.dcp.StorageReader.validate_checkpoint_id(os.path.join(root, "step-00000006"))
    assert not stint.dcp.StorageReader.validate_checkpoint_id(os.path.join(root, "step-7"))
    assert not stint.dcp.StorageReader.validate_checkpoint_id("s3://bucket/x")


def test_two_overlapping_async_saves_to_one_root_both_commit(root):
    import stint.dcp
    warnings.simplefilter("ignore")
    # The first save is large so that it is still writing (its .tmp- directory
    # exists) when the second one starts; the second takes its turn.
    big = {"w": torch.arange(16 << 20, dtype=torch.float32)}
    small = {"w": torch.full((1024,), 2.0)}
    first = dcp.async_save(big, storage_writer=stint.dcp.StorageWriter(root, step=1, keep_last=0,
                                                                       timeout=300))
    deadline = time.monotonic() + 300
    while not glob.glob(os.path.join(root, ".tmp-1-*")) and not first.done():
        assert time.monotonic() < deadline, "the first async_save never started writing"
        time.sleep(0.001)
    second = dcp.async_save(small, storage_writer=stint.dcp.StorageWriter(root, step=2,
                                                                          keep_last=0,
                                                                          timeout=300))
    first.result(timeout=300)
    second.result(timeout=300)
    for step, saved in ((1, big), (2, small)):
        out = {"w": torch.zeros_like(saved["w"])}
        dcp.load(out, storage_reader=stint.dcp.StorageReader(root, step=step))
        assert torch.equal(out["w"], saved["w"]), step
    assert stint.Checkpointer(root, read_only=True).list_committed() == [1, 2]


def test_dcp_loads_a_checkpoint_written_by_plain_stint(root):
    import stint.dcp
    from stint import _C
    warnings.simplefilter("ignore")
    ckpt = _C.Checkpointer(root)
    w = torch.randn(4, 5)
    ckpt.save(3, ["layer.w"], [w], {}).durable.result(30)
    ckpt.close()
    out = {"layer": {"w": torch.zeros(4, 5)}}
    dcp.load(out, storage_reader=stint.dcp.StorageReader(root))
    assert torch.equal(out["layer"]["w"], w)


def test_damaged_chunk_raises_data_loss_not_garbage(root):
    import stint.dcp
    from stint import _C
    warnings.simplefilter("ignore")
    big = torch.arange(64 * 1024, dtype=torch.float32)
    dcp.save({"big": big}, storage_writer=stint.dcp.StorageWriter(root))
    files = [f for f in glob.glob(os.path.join(root, "step-00000000", "*"))
             if os.path.basename(f) != "MANIFEST" and os.path.getsize(f) > 100000]
    assert len(files) == 1, os.listdir(os.path.join(root, "step-00000000"))
    with open(files[0], "r+b") as f:
        f.seek(12345)
        byte = f.read(1)
        f.seek(12345)
        f.write(bytes([byte[0] ^ 0x40]))
    out = {"big": torch.zeros_like(big)}
    with pytest.raises(BaseException) as info:
        dcp.load(out, storage_reader=stint.dcp.StorageReader(root))
    errors = stint.dcp.stint_errors(info.value)
    assert errors and all(isinstance(e, _C.DataLossError) for e in errors), repr(info.value)


if __name__ == "__main__":
    import faulthandler
    faulthandler.dump_traceback_later(float(os.environ["DCP_STACKS_AFTER"]), exit=True)
    from util import run_and_exit
    run_and_exit(_worker, sys.argv[1])
