"""examples/python/train.py, SIGTERMed mid-run (its whole process group,
DataLoader workers included, as Slurm does) and started again until done,
must end bit-identical to one uninterrupted run: parameters, AdamW state,
LR schedule, data cursor, RNG."""

import os
import signal
import subprocess
import sys

import pytest
import torch

import stint
from util import assert_same_tree

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TRAIN = os.path.join(REPO, "examples", "python", "train.py")
STEPS = 240  # 63 steps per epoch: the run crosses three epoch boundaries


def _cmd(ckpt):
    return [sys.executable, TRAIN, "--ckpt", ckpt, "--steps", str(STEPS), "--workers", "2",
            "--step-sleep", "0.01"]


def _run(ckpt, env, stderr, kill_after_step=None):
    """Runs the script; with kill_after_step, SIGTERMs its process group as soon
    as it printed that step. Returns (exit code, first step, last step printed)."""
    proc = subprocess.Popen(_cmd(ckpt), stdout=subprocess.PIPE, stderr=stderr, text=True, env=env,
                            start_new_session=True)
    start = last = None
    try:
        for line in proc.stdout:
            words = line.split()
            if line.startswith("start at step"):
                start = int(words[-1])
            elif words and words[0] == "step":
                last = int(words[1])
                if kill_after_step is not None and last >= kill_after_step:
                    os.killpg(proc.pid, signal.SIGTERM)
                    kill_after_step = None
        rc = proc.wait(timeout=300)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return rc, start, last


def _final_state(ckpt):
    with stint.Checkpointer(ckpt) as c:
        r = c.load_result()
    assert r.step == STEPS
    s = r.state
    del s["rng"]["torch"]  # compared below as bytes
    return s, r


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """One uninterrupted run."""
    ref = str(tmp_path_factory.mktemp("uninterrupted") / "ckpt")
    env = dict(os.environ)
    pkg_parent = os.path.dirname(os.path.dirname(stint.__file__))
    env["PYTHONPATH"] = pkg_parent + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("STINT_GRACE_SECONDS", None)
    with open(os.path.join(os.path.dirname(ref), "stderr.txt"), "a+") as err:
        rc, start, last = _run(ref, env, err)
        err.seek(0)
        assert (rc, start, last) == (0, 0, STEPS), err.read()
    return ref


def _assert_same_final(ref, run):
    a, ra = _final_state(ref)
    b, rb = _final_state(run)
    assert_same_tree(a, b)
    # The torch CPU generator (dropout) too, byte for byte.
    assert (stint.CheckpointReader(ra.dir).state()["rng"]["torch"] ==
            stint.CheckpointReader(rb.dir).state()["rng"]["torch"])
    return a


@pytest.fixture
def err_file(tmp_path):
    with open(tmp_path / "stderr.txt", "a+") as f:  # O_APPEND: every run adds to the end
        yield f


def test_sigterm_and_resume_is_bit_exact(tmp_path, python_env, err_file, reference):
    run = str(tmp_path / "interrupted")
    starts = []
    for kill_at in (37, 150):  # mid-epoch, before and after the periodic save at 100
        rc, start, last = _run(run, python_env, err_file, kill_after_step=kill_at)
        err_file.seek(0)
        assert rc == stint.EXIT_REQUEUE, err_file.read()
        assert kill_at <= last < STEPS
        starts.append(start)
        with stint.Checkpointer(run) as c:
            assert c.latest_step() == last  # the emergency checkpoint of the step it stopped at
    rc, start, last = _run(run, python_env, err_file)
    assert rc == 0 and last == STEPS
    starts.append(start)
    assert starts[0] == 0 and starts[1] >= 37 and starts[2] >= 150
    err_file.seek(0)
    log = err_file.read()
    assert log.count("stint: preempted at step") == 2, log
    assert "DataLoader worker" not in log, log

    a = _assert_same_final(reference, run)
    assert set(a["model"]) == {"0.weight", "0.bias", "3.weight", "3.bias", "6.weight", "6.bias"}
    assert len(a["optim"]["state"]) == 6 and a["objects"]["sched"]["last_epoch"] == STEPS


def test_a_killed_run_resumes_from_the_periodic_checkpoint(tmp_path, python_env, err_file, reference):
    """SIGKILL leaves no time for an emergency save: the run resumes from step 100."""
    run = str(tmp_path / "killed")
    proc = subprocess.Popen(_cmd(run), stdout=subprocess.PIPE, stderr=err_file, text=True,
                            env=python_env, start_new_session=True)
    try:
        for line in proc.stdout:
            if line.startswith("step 130 "):
                os.killpg(proc.pid, signal.SIGKILL)
                break
        proc.wait(timeout=300)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == -signal.SIGKILL
    rc, start, last = _run(run, python_env, err_file)
    assert (rc, start, last) == (0, 100, STEPS)
    _assert_same_final(reference, run)
