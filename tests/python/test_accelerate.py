"""stint.accelerate against the real accelerate.Accelerator (a small MLP with
dropout, AdamW, StepLR, a shuffled StatefulDataLoader; CPU, one process and
two DDP ranks over Gloo under torchrun):
SIGTERM mid-epoch exits 75 after an emergency checkpoint, SIGKILL loses only
the steps after the last durable save; load_state() then resumes from the
newest durable step and matches an uninterrupted run bit for bit (per-step
loss and parameter sums, the final parameters)."""

import os
import re
import signal
import time

import pytest

pytest.importorskip("accelerate")
pytest.importorskip("torchdata")
import torch  # noqa: E402
from util import assert_replayed, assert_same_tree, finish_run, read_records, run_output, start_example  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(REPO, "examples", "accelerate", "train.py")
STEPS = 16       # 10 steps per epoch, saves every 4
TIMEOUT = 120    # one run: imports, 16 tiny steps, its exit


def _run(tmp, env, world, *args):
    return start_example(SCRIPT, tmp, env, STEPS, world, *args)


def _final(tmp):
    import stint
    with stint.Checkpointer(str(tmp / "run" / "stint"), read_only=True, collective=False) as c:
        return c.load(step=STEPS)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    got = {}

    def get(env, world):
        if world not in got:
            tmp = tmp_path_factory.mktemp("accelerate-reference")
            p = _run(tmp, env, world)
            assert finish_run(p, tmp, TIMEOUT) == 0, run_output(tmp)
            got[world] = (read_records(tmp), _final(tmp))
        return got[world]
    return get


@pytest.fixture
def env(python_env):
    env = dict(python_env, OMP_NUM_THREADS="1")
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(k, None)
    return env


# One process, a notice at 13: between saves, in the second epoch (the
# loader's epoch and position both restored). Two ranks (DDP over Gloo, 5
# steps per epoch each): a notice to rank 0 only stops both at 6; every rank
# SIGKILLed at 7 goes back to step 4.
@pytest.mark.parametrize("how,pause,world", [("notice", 13, 1), ("notice", 6, 2),
                                             ("sigkill", 7, 2)])
def test_kill_and_resume_matches(tmp_path, env, reference, how, pause, world):
    records, final = reference(env, world)
    p = _run(tmp_path, env, world, "--pause-at", str(pause))
    deadline = time.monotonic() + TIMEOUT
    while not (tmp_path / "rec.paused").exists():
        if p.poll() is not None or time.monotonic() > deadline:
            os.killpg(p.pid, signal.SIGKILL)  # torchrun's workers end at their own deadline
            p.wait()
            pytest.fail("run did not reach step %d:\n%s" % (pause, run_output(tmp_path)))
        time.sleep(0.02)
    root = tmp_path / "run" / "stint"
    if how == "notice":
        os.kill(int((tmp_path / "rec.pid0").read_text()), signal.SIGTERM)
        code = finish_run(p, tmp_path, TIMEOUT)
        if world == 1:
            assert code == 75, run_output(tmp_path)
        else:  # torchrun reports its workers' 75 as a failure, naming each one's
            text = (tmp_path / "out.txt").read_bytes().decode(errors="replace")
            exits = re.findall(r"exitcode\s*:\s*75 \(pid", text)
            assert code != 0 and len(exits) == world, text[-6000:]
        import stint
        with stint.Checkpointer(str(root), read_only=True, collective=False) as c:
            assert c.latest_step() == pause
    else:
        for rank in range(world):  # every rank (torchrun's are not in its group), then torchrun
            os.kill(int((tmp_path / ("rec.pid%d" % rank)).read_text()), signal.SIGKILL)
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
    durable = 0
    if root.is_dir():
        import stint
        with stint.Checkpointer(str(root), read_only=True, collective=False) as c:
            durable = c.latest_step() or 0  # 4, or 0 if its commit had not ended
    p = _run(tmp_path, env, world)
    assert finish_run(p, tmp_path, TIMEOUT) == 0, run_output(tmp_path)
    assert_replayed(read_records(tmp_path), records, STEPS,
                    range(durable + 1, pause + 1) if how == "sigkill" else [])
    mine = _final(tmp_path)
    assert_same_tree(mine["models"], final["models"], "models")
    assert_same_tree(mine["optimizers"], final["optimizers"], "optimizers")
    assert mine["schedulers"] == final["schedulers"]
    assert mine["dataloaders"] == final["dataloaders"]


def test_save_state_folder_gets_a_pointer_and_loads_it(tmp_path):
    """save_state(output_dir) writes output_dir/stint.json once durable;
    load_state(output_dir) loads that step, load_state() the newest."""
    import stint
    from stint.accelerate import Accelerator
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    acc = Accelerator(cpu=True, stint_root=str(tmp_path / "ckpt"), preemption=False)
    model, opt = acc.prepare(model, opt)
    assert acc.stint_latest_step() is None
    saved = {}
    for step in (1, 2):
        model(torch.ones(1, 4)).sum().backward()
        opt.step()
        opt.zero_grad()
        acc.save_state(str(tmp_path / ("ckpt-%d" % step)), step=step)
        saved[step] = {k: v.clone() for k, v in model.state_dict().items()}
    acc.stint_poll(wait=True)
    assert (tmp_path / "ckpt-1" / "stint.json").is_file()
    assert acc.load_state(str(tmp_path / "ckpt-1")) == 1
    assert_same_tree(dict(model.state_dict()), saved[1])
    assert acc.load_state() == 2
    assert_same_tree(dict(model.state_dict()), saved[2])
    acc.save_state(step=2)  # committed already: not saved again
    acc.close_stint()
    with stint.Checkpointer(str(tmp_path / "ckpt"), read_only=True, collective=False) as c:
        assert c.list_committed() == [1, 2]
