"""Fencing where users save: a stint.Checkpointer in a process that runs for a
stintd job checks its worker incarnation before every commit, so a worker
that lost its lease cannot commit a step or move LATEST.

Real stintd (and stint-agent) processes on loopback; real worker processes
with the environment stint-agent gives them. Needs the binaries ($STINTD_PATH,
$STINT_AGENT_PATH, set by ctest); skipped without them.
"""

import json
import os
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

from test_elastic import STINTD, WORKER, Stintd

STINT_AGENT = os.environ.get("STINT_AGENT_PATH", "")

pytestmark = pytest.mark.skipif(not os.path.exists(STINTD), reason="stintd is not built ($STINTD_PATH)")


def http(url, method, path, token, body=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url + path, data=data, method=method,
                                 headers={"Authorization": "Bearer " + token,
                                          "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read().decode())


def still_current(url, secret, job, token):
    """Whether stintd still holds the worker's incarnation current: False
    once it answers valid=false, or 410 (the worker's segment ended, so its
    secret is gone too: which of the two comes first depends on timing)."""
    try:
        return http(url, "POST", "/v1/fencing/check", secret,
                    {"job_id": job, "fencing_token": token})["valid"]
    except urllib.error.HTTPError as e:
        if e.code == 410:
            return False
        raise


# Saves `step` of a small state with a stint.Checkpointer opened the way a
# user does (no fencing argument) and prints the outcome of its durable future.
SAVE_ONE = r"""
import sys, torch, stint
ckpt = stint.Checkpointer(sys.argv[1], keep_last=0)
handle = ckpt.save(int(sys.argv[2]), {"w": torch.full((1024,), float(sys.argv[2]))})
try:
    handle.durable.result(120)
    print("durable")
except stint.Error as e:
    print("refused: %s: %s" % (type(e).__name__, e))
ckpt.close()
"""


# The same through torch.distributed.checkpoint with stint's writer.
DCP_SAVE = r"""
import sys, torch, stint, stint.dcp
import torch.distributed.checkpoint as dcp
try:
    dcp.save({"w": torch.ones(1024)}, storage_writer=stint.dcp.StorageWriter(sys.argv[1], keep_last=0))
    print("durable")
except BaseException as e:  # DCP wraps it in CheckpointException, a BaseException
    print("refused: %s: %s" % (type(e).__name__, e))
"""

RESUMABLE_TRAINING = os.environ.get("STINT_RESUMABLE_TRAINING", "")


def run_save(root, step, env):
    r = subprocess.run([sys.executable, "-c", SAVE_ONE, root, str(step)], env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout.strip()


def latest(root):
    with open(os.path.join(root, "LATEST")) as f:
        return f.read().strip()


def test_a_fenced_workers_checkpointer_cannot_commit_and_latest_stays(tmp_path, python_env):
    stintd = Stintd(str(tmp_path))
    try:
        job = stintd.running_job(gpus=1)
        # What stint-agent does for a process it starts: register it, put
        # the registration in its environment.
        reg = http(stintd.url, "POST", "/v1/jobs/%d/workers" % job, WORKER, {"name": "w0"})
        wid, secret = reg["worker_id"], reg["worker_secret"]
        env = dict(python_env, STINT_COORD_URL=stintd.url, STINT_JOB_ID=str(job),
                   STINT_WORKER_ID=str(wid), STINT_WORKER_SECRET=secret,
                   STINT_FENCING_TOKEN=str(reg["fencing_token"]))
        env.pop("STINT_COORD_TOKEN", None)
        root = str(tmp_path / "ckpt")
        assert run_save(root, 1, env) == "durable"
        assert latest(root) == "step-00000001"

        # The job's GPUs go away: its segment ends and stintd fences the
        # incarnation, which the worker process is never told.
        window = stintd.call("GET", "/v1/windows")["windows"][0]["id"]
        stintd.call("POST", "/v1/windows/%d/close" % window, {})
        deadline = time.monotonic() + 60
        while still_current(stintd.url, secret, job, reg["fencing_token"]):
            assert time.monotonic() < deadline, "stintd never fenced worker %d" % wid
            time.sleep(0.05)

        outcome = run_save(root, 2, env)
        assert outcome.startswith("refused: AbortedError: ") and "fenced: " in outcome, outcome
        assert latest(root) == "step-00000001"
        assert sorted(d for d in os.listdir(root) if d.startswith("step-")) == \
            ["step-00000001"]

        r = subprocess.run([sys.executable, "-c", DCP_SAVE, root], env=env,
                           capture_output=True, text=True, timeout=300)
        assert r.stdout.startswith("refused: ") and "AbortedError" in r.stdout, r.stdout + r.stderr
        assert "fenced: " in r.stdout, r.stdout
        # C++: stint::ResumableTraining (examples/resumable_training).
        if RESUMABLE_TRAINING:
            cpp_root = str(tmp_path / "cpp")
            r = subprocess.run([RESUMABLE_TRAINING, "--ckpt-dir", cpp_root, "--steps", "20",
                                "--every", "10"], env=env, capture_output=True, text=True,
                               timeout=300)
            assert r.returncode != 0 and "fenced: " in r.stdout + r.stderr, r.stdout + r.stderr
            assert not [d for d in os.listdir(cpp_root) if d.startswith("step-")]
        assert latest(root) == "step-00000001"
        assert sorted(d for d in os.listdir(root) if d.startswith("step-")) == \
            ["step-00000001"]

        # The opt-out: fencing=False commits whatever stintd says.
        r = subprocess.run([sys.executable, "-c", SAVE_ONE.replace(
            "keep_last=0)", "keep_last=0, fencing=False)"), root, "3"], env=env,
            capture_output=True, text=True, timeout=300)
        assert r.stdout.strip() == "durable", r.stdout + r.stderr
    finally:
        stintd.stop()


@pytest.mark.skipif(not os.path.exists(STINT_AGENT), reason="stint-agent is not built ($STINT_AGENT_PATH)")
def test_a_partitioned_segment_cannot_commit_after_the_job_was_requeued(tmp_path, python_env):
    """Two real stint-agents: the one running the job is stopped (SIGSTOP) past
    its node's lease, stintd requeues the job on the other, the old segment's
    ranks go on saving (with the default Checkpointer), then SIGCONT. The
    campaign's partition fault checks that every step committed after the new
    segment resumed is the new segment's, that the old segment's saves were
    refused as fenced, and that the newest checkpoint loads bit-exactly."""
    import stint
    build = os.path.dirname(os.path.dirname(os.path.dirname(stint.__file__)))
    campaign = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))), "tools", "fault_campaign.py")
    r = subprocess.run([sys.executable, campaign, "--build", build, "--kinds", "partition",
                        "--faults", "1", "--seed", "3", "--workdir", str(tmp_path)],
                       env=python_env, capture_output=True, text=True, timeout=540)
    assert r.returncode == 0 and "failures: 0" in r.stdout, r.stdout + r.stderr
    assert re.search(r"old segment refused [1-9]\d* saves, e.g. .*fenced", r.stdout), r.stdout


def test_a_checkpointer_fenced_by_an_elastic_workers_session(tmp_path):
    """fencing=worker: the registration of the worker's own session (no
    stint-agent): its commits stop once stintd ended its segment."""
    import torch
    import stint
    import stint.elastic
    stintd = Stintd(str(tmp_path))
    try:
        job = stintd.running_job(gpus=1)
        with stint.elastic.ElasticWorker(stintd.url, WORKER, job) as worker:
            ckpt = stint.Checkpointer(str(tmp_path / "ckpt"), collective=False, fencing=worker)
            ckpt.save(1, {"w": torch.ones(8)}).durable.result(60)
            window = stintd.call("GET", "/v1/windows")["windows"][0]["id"]
            stintd.call("POST", "/v1/windows/%d/close" % window, {})
            deadline = time.monotonic() + 60
            while not worker.fenced:  # the session's heartbeat learns it
                assert time.monotonic() < deadline, "the worker was never fenced"
                time.sleep(0.05)
            with pytest.raises(stint.AbortedError, match="fenced: "):
                ckpt.save(2, {"w": torch.ones(8)}).durable.result(60)
            assert ckpt.list_committed() == [1]
            ckpt.close()
    finally:
        stintd.stop()
