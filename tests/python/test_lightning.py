"""stint.lightning against the real Lightning: a run stopped mid-epoch by a
real signal (the notice: exit 75 after an emergency checkpoint; or SIGKILL)
and resumed with ckpt_path="last" matches an uninterrupted run bit for bit
(per-step losses, final parameters), on one process and on DDP over Gloo;
Slurm: stint's stop wins over SLURMEnvironment's requeue, and with
preemption=False Lightning's hpc checkpoint goes through stint."""

import os
import signal
import subprocess
import sys
import time

import pytest
import torch
from util import finish_run, run_output

L = pytest.importorskip("lightning")

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(REPO, "examples", "lightning", "train.py")
STEPS = 30          # 12 steps per epoch: the stop at 17 is in the middle of epoch 1
PAUSE = 16
TIMEOUT = 300       # one run: seconds for Lightning's start, 30 tiny steps and its exit


def _env(python_env, **extra):
    env = dict(python_env)
    for k in list(env):
        if k.startswith(("SLURM_", "STINT_SLURM")) or k in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
            del env[k]
    env.update(extra)
    return env


def _run(tmp, env, *args):
    cmd = [sys.executable, SCRIPT, "--root", str(tmp / "run"), "--steps", str(STEPS),
           "--log", str(tmp / "log"), "--final", str(tmp / "final.pt")] + list(args)
    out = open(tmp / "out.txt", "ab")
    return subprocess.Popen(cmd, env=env, cwd=str(tmp), stdout=out, stderr=subprocess.STDOUT)




def _wait_paused(p, tmp):
    """Until the run reached --pause-at (it waits there for the signal)."""
    deadline = time.monotonic() + TIMEOUT
    while not (tmp / "log.paused").exists():
        if p.poll() is not None or time.monotonic() > deadline:
            p.kill()
            pytest.fail("run did not reach its pause (rc %s):\n%s" % (p.poll(), run_output(tmp)))
        time.sleep(0.02)


def _losses(tmp):
    out = {}
    for line in (tmp / "log").read_text().splitlines():
        step, loss = line.split()
        out.setdefault(int(step), []).append(loss)
    return out


@pytest.fixture(scope="module")
def reference(tmp_path_factory, request):
    """Uninterrupted runs, one per device count."""
    runs = {}

    def get(devices, python_env):
        if devices not in runs:
            tmp = tmp_path_factory.mktemp("reference-%d" % devices)
            p = _run(tmp, _env(python_env), "--devices", str(devices), *_strategy(devices))
            assert finish_run(p, tmp, TIMEOUT) == 0, run_output(tmp)
            runs[devices] = (_losses(tmp), torch.load(tmp / "final.pt"))
        return runs[devices]
    return get


def _strategy(devices):
    return ["--strategy", "ddp"] if devices > 1 else []


def _assert_same(tmp, ref, resumed_from=None):
    losses, final = ref
    got = _losses(tmp)
    assert sorted(got) == list(range(1, STEPS + 1)), sorted(got)
    for step, values in got.items():
        # A step trained twice (after SIGKILL, from the last durable step) has the same loss twice.
        assert all(v == losses[step][0] for v in values), (step, values, losses[step])
    mine = torch.load(tmp / "final.pt")
    assert mine.keys() == final.keys()
    for k in final:
        assert torch.equal(mine[k], final[k]), k


@pytest.mark.parametrize("devices", [1, 2])
def test_notice_stops_with_75_and_resume_matches(tmp_path, python_env, reference, devices):
    ref = reference(devices, python_env)
    env = _env(python_env)
    p = _run(tmp_path, env, "--devices", str(devices), "--pause-at", str(PAUSE), *_strategy(devices))
    _wait_paused(p, tmp_path)
    p.send_signal(signal.SIGTERM)
    assert finish_run(p, tmp_path, TIMEOUT) == 75, run_output(tmp_path)
    steps = sorted(_losses(tmp_path))
    assert steps[-1] == PAUSE + 1, steps  # stopped at the next step boundary
    import stint
    with stint.Checkpointer(str(tmp_path / "run" / "stint"), read_only=True) as c:
        assert c.latest_step() == PAUSE + 1
    assert "stint.lightning.pointer" in (tmp_path / "run" / "links" / "last.ckpt").read_text()
    p = _run(tmp_path, env, "--devices", str(devices), *_strategy(devices))
    assert finish_run(p, tmp_path, TIMEOUT) == 0, run_output(tmp_path)
    _assert_same(tmp_path, ref)


def test_sigkill_resumes_from_last_durable_step(tmp_path, python_env, reference):
    ref = reference(1, python_env)
    env = _env(python_env)
    p = _run(tmp_path, env, "--pause-at", str(PAUSE - 1))  # 3 steps after the save at 12
    _wait_paused(p, tmp_path)
    p.kill()
    p.wait()
    import stint
    with stint.Checkpointer(str(tmp_path / "run" / "stint"), read_only=True) as c:
        durable = c.latest_step() or 0  # 12, or 8 when 12's commit had not ended yet
    p = _run(tmp_path, env)
    assert finish_run(p, tmp_path, TIMEOUT) == 0, run_output(tmp_path)
    got = _losses(tmp_path)
    # The steps after the newest durable one are trained twice (alike: _assert_same).
    assert [s for s, v in got.items() if len(v) == 2] == list(range(durable + 1, PAUSE))
    _assert_same(tmp_path, ref)


def _slurm_env(python_env, tmp):
    bin_dir = tmp / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "scontrol"
    # Lightning's requeue runs `scontrol requeue <job>`: record it instead.
    fake.write_text("#!/bin/sh\necho \"$@\" >> %s\n" % (tmp / "scontrol.txt"))
    fake.chmod(0o755)
    return _env(python_env, SLURM_JOB_ID="4242", SLURM_JOB_NAME="train", SLURM_NTASKS="1",
                SLURM_PROCID="0", SLURM_LOCALID="0", SLURM_NODEID="0", SLURM_NNODES="1",
                SLURM_JOB_NODELIST="localhost", STINT_SLURM_REQUEUE="script",
                PATH="%s%s%s" % (bin_dir, os.pathsep, python_env.get("PATH", "")))


def test_slurm_stint_wins_over_lightning_requeue(tmp_path, python_env, reference):
    ref = reference(1, python_env)
    env = _slurm_env(python_env, tmp_path)
    p = _run(tmp_path, env, "--pause-at", str(PAUSE))
    _wait_paused(p, tmp_path)
    p.send_signal(signal.SIGUSR1)  # SLURMEnvironment's requeue signal
    assert finish_run(p, tmp_path, TIMEOUT) == 75, run_output(tmp_path)
    run = tmp_path / "run"
    assert not [n for n in os.listdir(run) if n.startswith("hpc_ckpt")]  # Lightning's did not run
    assert not (tmp_path / "scontrol.txt").exists()  # the batch script requeues on 75
    assert "step=%d" % (PAUSE + 1) in (run / "stint" / "REQUEUE").read_text()
    p = _run(tmp_path, env)
    assert finish_run(p, tmp_path, TIMEOUT) == 0, run_output(tmp_path)
    _assert_same(tmp_path, ref)


def test_slurm_lightning_requeue_saves_through_stint(tmp_path, python_env):
    env = _slurm_env(python_env, tmp_path)
    p = _run(tmp_path, env, "--pause-at", str(PAUSE), "--no-preemption")
    _wait_paused(p, tmp_path)
    p.send_signal(signal.SIGUSR1)
    assert finish_run(p, tmp_path, TIMEOUT) == 0, run_output(tmp_path)  # Lightning trains on after its requeue
    assert (tmp_path / "scontrol.txt").read_text().split() == ["requeue", "4242"]
    import stint.lightning as sl
    hpc = tmp_path / "run" / "hpc_ckpt_1.ckpt"
    assert sl.read_pointer(str(hpc))["step"] == PAUSE
    io = sl.CheckpointIO(str(tmp_path / "run" / "stint"))
    try:
        state = io.load_checkpoint(str(hpc))  # an hpc pointer: the newest durable step
        assert state["global_step"] == io.checkpointer.latest_step() == 28  # saves every 4
        assert set(state["state_dict"]) == {"net.0.weight", "net.0.bias", "net.3.weight", "net.3.bias"}
    finally:
        io.close()
