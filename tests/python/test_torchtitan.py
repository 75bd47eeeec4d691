"""stint.torchtitan against the real torchtitan 0.3.0 checkpointer protocol
(BaseCheckpointManager, ModelWrapper, OptimizersContainer,
LRSchedulersContainer, ParallelAwareDataloader) on CPU: a run SIGKILLed at
step 7 (one process, and two ranks under torchrun over Gloo) resumes from
the newest durable step and matches an uninterrupted run bit for bit
(per-step loss and parameter sums, the final state), across an epoch end."""

import os
import signal
import time

import pytest

import torch
from util import assert_replayed, finish_run, read_records, run_output, start_example

import stint

try:  # tools/setup.sh installs torchtitan without its training-only dependencies
    import torchtitan.components.checkpointer  # noqa: F401
    _titan = None
except ImportError as e:
    _titan = "torchtitan 0.3.0 is not importable: %s" % e
pytestmark = pytest.mark.skipif(_titan is not None, reason=str(_titan))

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(REPO, "examples", "torchtitan", "train.py")
STEPS = 24       # saves every 4; an epoch is 20 steps at one rank, 10 at two
TIMEOUT = 120    # one run: imports, the process group, 24 tiny steps


def _run(tmp, env, world, *args):
    return start_example(SCRIPT, tmp, env, STEPS, world, *args)


def _final(tmp):
    reader = stint.CheckpointReader(str(tmp / "run" / "checkpoint" / ("step-%08d" % STEPS)))
    return reader.read()


def _latest(tmp):
    root = tmp / "run" / "checkpoint"
    if not root.is_dir():
        return 0
    with stint.Checkpointer(str(root), read_only=True, collective=False) as c:
        return c.latest_step() or 0


@pytest.mark.parametrize("world", [1, 2])
def test_sigkill_and_resume_matches(tmp_path, python_env, world):
    env = dict(python_env, OMP_NUM_THREADS="1")
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(k, None)
    ref = tmp_path / "reference"
    ref.mkdir()
    p = _run(ref, env, world)
    assert finish_run(p, ref, TIMEOUT) == 0, run_output(ref)
    records, final = read_records(ref), _final(ref)

    tmp = tmp_path / "killed"
    tmp.mkdir()
    pause = 7
    p = _run(tmp, env, world, "--pause-at", str(pause))
    deadline = time.monotonic() + TIMEOUT
    while not (tmp / "rec.paused").exists():
        if p.poll() is not None or time.monotonic() > deadline:
            os.killpg(p.pid, signal.SIGKILL)  # its workers end at their own deadline
            p.wait()
            pytest.fail("run did not reach step %d:\n%s" % (pause, run_output(tmp)))
        time.sleep(0.02)
    for rank in range(world):  # every rank, then torchrun
        os.kill(int((tmp / ("rec.pid%d" % rank)).read_text()), signal.SIGKILL)
    os.killpg(p.pid, signal.SIGKILL)
    p.wait()
    durable = _latest(tmp)  # 4, or 0 if its commit had not ended
    p = _run(tmp, env, world)
    assert finish_run(p, tmp, TIMEOUT) == 0, run_output(tmp)
    assert_replayed(read_records(tmp), records, STEPS, range(durable + 1, pause + 1))
    mine = _final(tmp)
    assert sorted(mine) == sorted(final)
    for k in final:
        assert torch.equal(mine[k], final[k]), k


def test_config_selects_the_stint_manager(tmp_path):
    """The Config builds the stint manager as torchtitan's Trainer builds
    its checkpointer (config.checkpoint.build(...)); unsupported options
    are refused, a disabled manager does nothing."""
    from torchtitan.components.checkpointer import BaseCheckpointManager
    from torchtitan.components.optimizer import OptimizersContainer, ParamGroupConfig
    from stint.torchtitan import CheckpointManager
    cfg = CheckpointManager.Config(enable=True, folder="ckpt", interval=2, keep_latest_k=2)
    assert isinstance(cfg, BaseCheckpointManager.Config)
    model = torch.nn.Linear(4, 2)
    opt = OptimizersContainer(OptimizersContainer.Config(
        param_groups=[ParamGroupConfig(pattern=".*", optimizer_name="AdamW",
                                       optimizer_kwargs={"lr": 0.1})],
        implementation="for-loop"), model_parts=[model])
    kwargs = dict(dataloader=None, model_parts=[model], optimizers=opt, lr_schedulers=None,
                  states={}, sd_adapter=None, base_folder=str(tmp_path))
    m = cfg.build(**kwargs)
    assert isinstance(m, CheckpointManager)
    assert m.load() is False  # a fresh start
    for step in range(1, 7):
        model(torch.ones(1, 4)).sum().backward()
        opt.step()
        opt.zero_grad()
        assert m.save(step) == (step % 2 == 0)
    m.maybe_wait_for_saving()
    m.close()
    with stint.Checkpointer(str(tmp_path / "ckpt"), read_only=True, collective=False) as c:
        assert c.list_committed() == [4, 6]  # keep_latest_k=2
    want = {k: v.clone() for k, v in model.state_dict().items()}
    with torch.no_grad():
        model.weight.zero_()
    m = cfg.build(**dict(kwargs, states={}))
    assert m.load(step=-1) is True
    assert torch.equal(model.weight, want["weight"])
    m.close()
    with pytest.raises(stint.UnimplementedError):
        CheckpointManager.Config(enable=True, initial_load_path="/x").build(**kwargs)
    off = CheckpointManager.Config(enable=False).build(**kwargs)
    assert off.save(2) is False and off.load() is False
