"""stint.dcp on an object store: torch.distributed.checkpoint's save and load
with StorageWriter/StorageReader("s3://bucket/prefix"), against a real
`rclone serve s3` on loopback (test_object_store's fixture). A save returns
once its step is committed in the store; a load reads straight from the
store, at any world size; `python -m stint.export` exports from it.

The multi-process test runs this file as a worker script (`python
test_dcp_object_store.py <phase>`, RANK/WORLD_SIZE/... and the AWS_*
settings in the environment): FSDP2 on Gloo/CPU, as test_dcp.py.
"""

import os
import shutil
import subprocess
import sys
import warnings

import pytest
import torch

import torch.distributed.checkpoint as dcp

from test_object_store import BUCKET, s3  # noqa: F401  (s3: the fixture)

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER_TIMEOUT = 180  # seconds per multi-process phase, start-up included
URL = "s3://%s/dcp-job" % BUCKET


def _plain_state():
    from test_dcp import _model, _train
    model = _model()
    opt = torch.optim.AdamW(model.parameters(), lr=0.01)
    _train(model, opt, 2, seed=1)
    return model, opt, {"model": model.state_dict(), "optim": opt.state_dict(),
                        "meta": {"epoch": 3, "name": "s3"}}


def _fresh_state():
    from test_dcp import _model, _train
    model = _model()
    opt = torch.optim.AdamW(model.parameters(), lr=0.5)
    _train(model, opt, 1, seed=7)
    return model, opt, {"model": model.state_dict(), "optim": opt.state_dict(),
                        "meta": {"epoch": 0, "name": ""}}


# ---- worker (run as a script, one process per rank) -------------------------------------

def _worker(phase):
    import torch.distributed as dist
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    import stint.dcp
    from test_dcp import _full_state, _model, _train

    warnings.simplefilter("ignore")
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    out = os.environ["DCP_OUT"]
    dist.init_process_group("gloo", init_method="file://" + os.environ["DCP_INIT"],
                            rank=rank, world_size=world)
    model = _model()
    fully_shard(model, mesh=init_device_mesh("cpu", (world,)))
    opt = torch.optim.AdamW(model.parameters(), lr=0.01)

    def state():
        msd, osd = get_state_dict(model, opt)
        return {"model": msd, "optim": osd, "meta": {"epoch": 7, "tag": "s3"}}

    def dump(name):
        full = _full_state(model, opt)
        if rank == 0:
            torch.save(full, os.path.join(out, name))

    if phase == "save":
        local = os.environ["DCP_LOCAL"]
        _train(model, opt, 2, seed=1)
        dcp.save(state(), storage_writer=stint.dcp.StorageWriter(URL, local_dir=local,
                                                                 commit_timeout=60))
        dump("step0.pt")
        _train(model, opt, 1, seed=2)
        dcp.save(state(), storage_writer=stint.dcp.StorageWriter(URL, local_dir=local,
                                                                 commit_timeout=60))
        dump("step1.pt")
        # dcp.save returned on every rank: both steps are committed in the store.
        assert stint.dcp._committed_steps(URL) == [0, 1]
        _train(model, opt, 1, seed=3)
        sd = state()
        dcp.load(sd, storage_reader=stint.dcp.StorageReader(URL))
        set_state_dict(model, opt, model_state_dict=sd["model"], optim_state_dict=sd["optim"])
        assert sd["meta"] == {"epoch": 7, "tag": "s3"}, sd["meta"]
        dump("loaded_2.pt")
    elif phase == "load":
        _train(model, opt, 1, seed=9)  # optimizer state to be overwritten
        sd = state()
        dcp.load(sd, storage_reader=stint.dcp.StorageReader(URL, step=0))
        set_state_dict(model, opt, model_state_dict=sd["model"], optim_state_dict=sd["optim"])
        dump("loaded_%d.pt" % world)
    dist.barrier()
    dist.destroy_process_group()


def _run_ranks(phase, world, tmp_path, env, local=""):
    from util import run_ranks
    env = dict(env, DCP_OUT=str(tmp_path), DCP_LOCAL=local,
               DCP_INIT=str(tmp_path / ("init-%s-%d" % (phase, world))),
               DCP_STACKS_AFTER=str(WORKER_TIMEOUT - 10),
               MASTER_ADDR="127.0.0.1", OMP_NUM_THREADS="1")
    run_ranks(__file__, [phase], world, env, tmp_path, "s3-%s-%d" % (phase, world),
              WORKER_TIMEOUT)


def _load(path):
    return torch.load(path, weights_only=False)


def _same_tensors(a, b):
    """Same keys, and every tensor bit for bit (whatever mapping types hold them)."""
    assert sorted(a) == sorted(b), (sorted(a), sorted(b))
    for k in a:
        assert a[k].dtype == b[k].dtype and torch.equal(a[k], b[k]), k


# ---- tests ------------------------------------------------------------------------

def test_single_process_save_returns_once_in_the_store_and_loads_from_it(s3, tmp_path):
    import stint.dcp
    from util import assert_same_tree
    warnings.simplefilter("ignore")
    model, opt, sd = _plain_state()
    local = str(tmp_path / "staging")
    for _ in range(3):
        dcp.save(sd, storage_writer=stint.dcp.StorageWriter(URL, local_dir=local, keep_last=2))
    # Committed in the store (keep_last there), staged locally (one kept).
    assert stint.dcp._committed_steps(URL) == [1, 2]
    assert sorted(os.listdir(s3 / BUCKET / "dcp-job")) == \
        [".writer.lock", "LATEST", "step-00000001", "step-00000002"]
    assert [d for d in os.listdir(local) if d.startswith("step-")] == ["step-00000002"]

    shutil.rmtree(local)  # the staging disk is gone: loads come from the store alone
    model2, opt2, sd2 = _fresh_state()
    dcp.load(sd2, storage_reader=stint.dcp.StorageReader(URL))
    opt2.load_state_dict(sd2["optim"])
    assert_same_tree(model2.state_dict(), model.state_dict())
    assert_same_tree(opt2.state_dict(), opt.state_dict())
    assert sd2["meta"] == {"epoch": 3, "name": "s3"}

    # checkpoint_id names a step in the store.
    assert stint.dcp.StorageReader.validate_checkpoint_id(URL + "/step-00000001")
    assert not stint.dcp.StorageReader.validate_checkpoint_id(URL + "/step-00000007")
    _, _, sd3 = _fresh_state()
    reader = stint.dcp.StorageReader(URL)
    dcp.load(sd3, checkpoint_id=URL + "/step-00000001", storage_reader=reader)
    assert reader.checkpoint_id == URL + "/step-00000001"
    _same_tensors(sd3["model"], model.state_dict())


def test_the_default_staging_root_is_keyed_by_the_url_under_stint_local_root(
        s3, tmp_path, monkeypatch):
    import stint.dcp
    monkeypatch.setenv("STINT_LOCAL_ROOT", str(tmp_path / "local"))
    _, _, sd = _plain_state()
    dcp.save(sd, storage_writer=stint.dcp.StorageWriter(URL))
    dcp.save(sd, storage_writer=stint.dcp.StorageWriter(URL + "-other"))
    staged = sorted(os.listdir(tmp_path / "local"))
    assert len(staged) == 2 and all(BUCKET in d for d in staged), staged
    assert stint.dcp._committed_steps(URL) == [0]
    assert stint.dcp._committed_steps(URL + "-other") == [0]


def test_a_save_that_cannot_reach_the_store_fails(s3, tmp_path, monkeypatch):
    import stint.dcp
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong-secret-Qq1")
    _, _, sd = _plain_state()
    with pytest.raises(BaseException) as err:
        dcp.save(sd, storage_writer=stint.dcp.StorageWriter(URL, local_dir=str(tmp_path / "l")))
    errors = stint.dcp.stint_errors(err.value)
    assert errors and "s3://%s/dcp-job" % BUCKET in str(errors[0]), repr(err.value)
    assert "wrong-secret-Qq1" not in str(err.value)


def test_two_ranks_save_to_the_store_and_three_load_from_it(s3, tmp_path):
    import stint
    env = dict(os.environ)
    pkg_parent = os.path.dirname(os.path.dirname(stint.__file__))
    env["PYTHONPATH"] = os.pathsep.join([pkg_parent, HERE, env.get("PYTHONPATH", "")])
    _run_ranks("save", 2, tmp_path, env, local=str(tmp_path / "staging"))
    from util import assert_same_tree
    assert_same_tree(_load(tmp_path / "loaded_2.pt"), _load(tmp_path / "step1.pt"))
    shutil.rmtree(tmp_path / "staging")  # loads need nothing local
    _run_ranks("load", 3, tmp_path, env)  # resharded: FSDP2 over 3 ranks
    assert_same_tree(_load(tmp_path / "loaded_3.pt"), _load(tmp_path / "step0.pt"))


def test_export_reads_a_checkpoint_in_the_store(s3, tmp_path, python_env):
    import stint.dcp
    model, opt, sd = _plain_state()
    dcp.save(sd, storage_writer=stint.dcp.StorageWriter(URL, local_dir=str(tmp_path / "l")))
    out = str(tmp_path / "out.pt")
    env = dict(python_env, **{k: os.environ[k] for k in os.environ if k.startswith("AWS_")})
    done = subprocess.run([sys.executable, "-m", "stint.export", "--format", "torch", URL, out],
                          env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    exported = torch.load(out, weights_only=False)
    _same_tensors(exported["model"], model.state_dict())
    assert exported["meta"] == {"epoch": 3, "name": "s3"}
    # A prefix with nothing committed: one line naming it, exit 1.
    done = subprocess.run([sys.executable, "-m", "stint.export", "--format", "torch",
                           URL + "-empty", out], env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 1 and "dcp-job-empty" in done.stderr, done.stderr


if __name__ == "__main__":
    import faulthandler
    faulthandler.dump_traceback_later(float(os.environ["DCP_STACKS_AFTER"]), exit=True)
    from util import run_and_exit
    run_and_exit(_worker, sys.argv[1])
