"""stint.torch_checkpointing against the real torch_checkpointing 0.1.1
CheckpointManager: its sync and async saves commit stint steps that load
back bit for bit, a damaged file raises stint.DataLossError, the Storage
keeps the rename contract of torch_checkpointing's Storage.rename (a
committed step is never replaced), and a run SIGKILLed (with its saver
process) resumes from the newest durable step and matches an uninterrupted
run bit for bit."""

import os
import signal
import subprocess
import sys
import time

import pytest

pytest.importorskip("torch_checkpointing")
import torch  # noqa: E402
from torch_checkpointing import CheckpointManager  # noqa: E402
from util import assert_replayed, assert_same_tree, finish_run, read_records, run_output, start_example  # noqa: E402

import stint  # noqa: E402
from stint.torch_checkpointing import StorageConfig, latest_checkpoint  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(REPO, "examples", "torch_checkpointing", "train.py")
STEPS = 16       # saves every 4
TIMEOUT = 120    # one run: imports, the saver process's start, 16 tiny steps


def _state():
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 4)
    opt = torch.optim.AdamW(model.parameters())
    model(torch.ones(2, 8)).sum().backward()
    opt.step()
    return model, opt


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_manager_saves_a_stint_step_and_loads_it(tmp_path, mode):
    root = str(tmp_path / "ckpt")
    cfg = (CheckpointManager.Config.with_sync_save() if mode == "sync"
           else CheckpointManager.Config())
    cfg.storage_config = StorageConfig(root=root)
    manager = CheckpointManager(cfg)
    model, opt = _state()
    assert latest_checkpoint(root) is None
    future = manager.save(os.path.join(root, "step-5"),
                          {"model": model.state_dict(), "optim": opt.state_dict(), "step": 5})
    if mode == "async":
        future.result(timeout=TIMEOUT)
    assert latest_checkpoint(root) == os.path.join(root, "step-5")
    with stint.Checkpointer(root, read_only=True, collective=False) as c:
        assert c.list_committed() == [5]
    assert not [n for n in os.listdir(root) if n.startswith("tmp_")]  # nothing staged on disk
    fresh = torch.nn.Linear(8, 4)
    got = manager.load(os.path.join(root, "step_000005"),  # any spelling of the step
                       into={"model": fresh.state_dict(), "optim": None, "step": None})
    manager.close()
    assert got["step"] == 5
    assert_same_tree(dict(fresh.state_dict()), dict(model.state_dict()))
    assert_same_tree(got["optim"], opt.state_dict())


def test_damaged_file_raises_data_loss(tmp_path):
    root = str(tmp_path / "ckpt")
    cfg = CheckpointManager.Config.with_sync_save()
    cfg.storage_config = StorageConfig(root=root, options={"direct_io": False})
    manager = CheckpointManager(cfg)
    model, _ = _state()
    manager.save(os.path.join(root, "step-1"), {"model": model.state_dict()})
    step_dir = os.path.join(root, "step-00000001")
    data = [os.path.join(step_dir, n) for n in os.listdir(step_dir) if n.endswith(".stint")]
    assert data
    with open(data[0], "r+b") as f:  # flip one byte of the data
        f.seek(64)
        b = f.read(1)
        f.seek(64)
        f.write(bytes([b[0] ^ 0xFF]))
    reader = CheckpointManager(CheckpointManager.Config(
        storage_config=StorageConfig(root=root)))
    with pytest.raises(Exception) as e:
        reader.load(os.path.join(root, "step-1"),
                    into={"model": torch.nn.Linear(8, 4).state_dict()})
    chain, err = [], e.value
    while err is not None:
        chain.append(err)
        err = err.__cause__ or err.__context__
    assert any(isinstance(x, stint.DataLossError) for x in chain), chain
    reader.close()
    manager.close()


def test_storage_keeps_the_rename_contract(tmp_path):
    root = tmp_path / "ckpt"
    s = StorageConfig(root=str(root)).create_storage()
    s.mkdir(root / "tmp_step-3")
    with s.get_write_stream(root / "tmp_step-3" / "a" / "x.pt", None) as f:
        f.write(b"hello")
    s.write(root / "tmp_step-3" / "meta.json", b"{}")
    assert s.exists(root / "tmp_step-3" / "a") and s.isdir(root / "tmp_step-3" / "a")
    assert not s.exists(root / "step-3")
    s.rename(root / "tmp_step-3", root / "step-3", is_directory=True)  # the commit
    assert s.exists(root / "step-3") and not s.exists(root / "tmp_step-3")
    assert s.ls(root) == ["step-3"]
    assert s.ls(root / "step-3") == ["a", "meta.json"]
    assert s.ls(root / "step-3" / "a") == ["x.pt"]
    assert s.isdir(root / "step-3" / "a") and not s.isdir(root / "step-3" / "meta.json")
    assert s.read(root / "step-3" / "a" / "x.pt") == b"hello"
    assert s.getsize(root / "step-3" / "a" / "x.pt") == 5
    with s.stream_read(root / "step-3" / "meta.json") as f:
        assert f.read() == b"{}"
    with pytest.raises(FileNotFoundError):
        s.read(root / "step-3" / "missing.pt")
    s.mkdir(root / "tmp_step-3")
    s.write(root / "tmp_step-3" / "x.pt", b"other")
    with pytest.raises(FileExistsError):  # an occupied destination is never replaced
        s.rename(root / "tmp_step-3", root / "step-3", is_directory=True)
    with pytest.raises(stint.FailedPreconditionError):  # only into a temporary directory
        s.write(root / "step-4" / "x.pt", b"x")
    with pytest.raises(stint.InvalidArgumentError):  # a checkpoint is named by its step
        s.mkdir(root / "tmp_last")
        s.write(root / "tmp_last" / "x.pt", b"x")
        s.rename(root / "tmp_last", root / "last", is_directory=True)
    with pytest.raises(stint.UnimplementedError):  # retention is stint's
        s.rmdir(root / "step-3")
    s.close()
    with stint.Checkpointer(str(root), read_only=True, collective=False) as c:
        assert c.list_committed() == [3]


def test_several_ranks_are_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("LOCAL_RANK", "0")
    with pytest.raises(stint.UnimplementedError):
        StorageConfig(root=str(tmp_path)).create_storage()


def _run(tmp, env, *args):
    return start_example(SCRIPT, tmp, env, STEPS, 1, *args)


def _final(tmp):
    with stint.Checkpointer(str(tmp / "run" / "ckpt"), read_only=True, collective=False) as c:
        r = stint.CheckpointReader(os.path.join(c.root, "step-%08d" % STEPS))
        return r.read()


def test_sigkill_and_resume_matches(tmp_path, python_env):
    ref = tmp_path / "reference"
    ref.mkdir()
    p = _run(ref, python_env)
    assert finish_run(p, ref, TIMEOUT) == 0, run_output(ref)
    records, final = read_records(ref), _final(ref)

    tmp = tmp_path / "killed"
    tmp.mkdir()
    pause = 7
    p = _run(tmp, python_env, "--pause-at", str(pause))
    deadline = time.monotonic() + TIMEOUT
    while not (tmp / "rec.paused").exists():
        if p.poll() is not None or time.monotonic() > deadline:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
            pytest.fail("run did not reach step %d:\n%s" % (pause, run_output(tmp)))
        time.sleep(0.02)
    os.killpg(p.pid, signal.SIGKILL)  # the training process and its saver process
    p.wait()
    path = latest_checkpoint(tmp / "run" / "ckpt")
    durable = int(path.rsplit("-", 1)[1]) if path else 0  # 4, or 0 if its commit had not ended
    p = _run(tmp, python_env)
    assert finish_run(p, tmp, TIMEOUT) == 0, run_output(tmp)
    assert_replayed(read_records(tmp), records, STEPS, range(durable + 1, pause + 1))
    mine = _final(tmp)
    assert sorted(mine) == sorted(final)
    for k in final:  # the files of the final checkpoint, byte for byte
        assert torch.equal(mine[k], final[k]), k


_KILLED_IN_SAVE = r'''
import os, sys, time
import torch
from torch_checkpointing import CheckpointManager
from stint.torch_checkpointing import StorageConfig

def hold(args):  # in the saver process: step 2's files are written, its commit not begun
    if args.path.endswith("step-2"):
        with open(os.environ["MARK"], "w") as f:
            f.write(str(os.getpid()))
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:  # the test kills it
            time.sleep(0.05)

if __name__ == "__main__":
    root = sys.argv[1]
    cfg = CheckpointManager.Config(storage_config=StorageConfig(root=root),
                                   pre_finalize_callback=hold)
    manager = CheckpointManager(cfg)
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 4)
    manager.save(os.path.join(root, "step-1"), {"model": model.state_dict()}).result()
    with torch.no_grad():
        model.weight.add_(1)
    manager.save(os.path.join(root, "step-2"), {"model": model.state_dict()}).result()
'''


def test_killed_before_the_commit_leaves_no_trace(tmp_path, python_env):
    """SIGKILL of the training process and its saver process after step 2's
    files were written but before its rename: step 2 never appears (the
    files lived in memory), step 1 still loads."""
    script = tmp_path / "save.py"
    script.write_text(_KILLED_IN_SAVE)
    root = tmp_path / "ckpt"
    mark = tmp_path / "mark"
    out = open(tmp_path / "out.txt", "ab")
    p = subprocess.Popen([sys.executable, str(script), str(root)],
                         env=dict(python_env, MARK=str(mark)), stdout=out,
                         stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + TIMEOUT
    while not mark.exists() or not mark.read_text():
        if p.poll() is not None or time.monotonic() > deadline:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
            pytest.fail("the save did not reach step 2's commit:\n%s" % run_output(tmp_path))
        time.sleep(0.02)
    os.kill(int(mark.read_text()), signal.SIGKILL)  # the saver (spawned: its own group too)
    os.killpg(p.pid, signal.SIGKILL)
    p.wait()
    assert latest_checkpoint(root) == str(root / "step-1")
    assert not [n for n in os.listdir(root) if n.startswith("tmp_")]
    manager = CheckpointManager(CheckpointManager.Config(
        storage_config=StorageConfig(root=str(root))))
    torch.manual_seed(0)
    want = torch.nn.Linear(8, 4)  # step 1's model, as the script made it
    fresh = torch.nn.Linear(8, 4)
    manager.load(str(root / "step-1"), into={"model": fresh.state_dict()})
    manager.close()
    assert_same_tree(dict(fresh.state_dict()), dict(want.state_dict()))
    # The next writer takes the root over from the dead one.
    s = StorageConfig(root=str(root)).create_storage()
    s.mkdir(root / "tmp_step-2")
    s.write(root / "tmp_step-2" / "x", b"x")
    s.rename(root / "tmp_step-2", root / "step-2", is_directory=True)
    s.close()
    assert latest_checkpoint(root) == str(root / "step-2")
