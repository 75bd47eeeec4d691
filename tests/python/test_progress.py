"""Training progress reaches stintd from where users train: stint.Resumable's
step_boundary(step, loss=...) and stint::ResumableTraining::StepBoundary(step,
loss) in a process with the worker registration stint-agent gives its
workers, and an ElasticWorker's report_loss. stintd keeps the job's loss curve
(GET /v1/jobs/{id}/losses) and its pace. An emergency checkpoint's seconds
from the notice to durable and on its replicas reach the segment's figure.

Real stintd on loopback, real worker processes; skipped without the binaries.
"""

import os
import signal
import subprocess
import sys
import time

import pytest

from test_elastic import STINTD, WORKER, Stintd
from test_fencing import http

pytestmark = pytest.mark.skipif(not os.path.exists(STINTD), reason="stintd is not built ($STINTD_PATH)")

RESUMABLE_TRAINING = os.environ.get("STINT_RESUMABLE_TRAINING", "")

# A loop through stint.Resumable whose loss at step s is 1 / s; each step
# takes 20 ms, so the 0.1 s heartbeat reads several losses.
TRAIN = r"""
import sys, time, torch, stint
model = torch.nn.Linear(4, 4)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
with stint.Resumable(sys.argv[1], model=model, optimizer=opt, save_every=10,
                     watch_signals=False) as run:
    step = run.resume()
    while step < 40:
        opt.step()
        step += 1
        time.sleep(0.02)
        run.step_boundary(step, loss=torch.tensor(1.0 / step))
    run.finish(step)
"""


def worker_env(stintd, job, python_env):
    """What stint-agent gives a process it starts: its registration."""
    reg = http(stintd.url, "POST", "/v1/jobs/%d/workers" % job, WORKER, {"name": "w0"})
    env = dict(python_env, STINT_COORD_URL=stintd.url, STINT_JOB_ID=str(job),
               STINT_WORKER_ID=str(reg["worker_id"]), STINT_WORKER_SECRET=reg["worker_secret"],
               STINT_FENCING_TOKEN=str(reg["fencing_token"]), STINT_HEARTBEAT_INTERVAL_SECONDS="0.1")
    env.pop("STINT_COORD_TOKEN", None)
    return env


def losses_of(stintd, job, want, deadline_s=30):
    """The job's loss points once there are `want` or more (heartbeats merge at a tick)."""
    deadline = time.monotonic() + deadline_s
    while True:
        points = stintd.call("GET", "/v1/jobs/%d/losses" % job)["points"]
        if len(points) >= want:
            return points
        assert time.monotonic() < deadline, "only %d loss points: %s" % (len(points), points)
        time.sleep(0.05)


def test_resumable_step_boundary_reports_the_loss_under_stint_agent(tmp_path, python_env):
    stintd = Stintd(str(tmp_path))
    try:
        job = stintd.running_job(gpus=1)
        env = worker_env(stintd, job, python_env)
        r = subprocess.run([sys.executable, "-c", TRAIN, str(tmp_path / "ckpt")], env=env,
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stdout + r.stderr
        points = losses_of(stintd, job, 3)
        steps = [p[0] for p in points]
        assert steps == sorted(set(steps)), points
        segments = [s["id"] for s in stintd.call("GET", "/v1/jobs/%d" % job)["segments"]]
        for step, loss, segment, _ in points:
            assert loss == pytest.approx(1.0 / step, rel=1e-6), points
            assert segment == segments[0], (points, segments)
        # The reporter's last beat on close carries the final step.
        deadline = time.monotonic() + 30
        while stintd.call("GET", "/v1/jobs/%d" % job)["last_step"] < 40:
            assert time.monotonic() < deadline, stintd.call("GET", "/v1/jobs/%d" % job)
            time.sleep(0.05)
    finally:
        stintd.stop()


def test_outside_stint_agent_step_boundary_takes_a_loss_and_reports_nothing(tmp_path, python_env):
    env = dict(python_env)
    for k in ("STINT_WORKER_ID", "STINT_WORKER_SECRET", "STINT_COORD_URL"):
        env.pop(k, None)
    r = subprocess.run([sys.executable, "-c", TRAIN, str(tmp_path / "ckpt")], env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.skipif(not RESUMABLE_TRAINING, reason="$STINT_RESUMABLE_TRAINING is not set")
def test_resumable_training_cpp_reports_the_loss_under_stint_agent(tmp_path, python_env):
    stintd = Stintd(str(tmp_path))
    try:
        job = stintd.running_job(gpus=1)
        env = worker_env(stintd, job, python_env)
        r = subprocess.run([RESUMABLE_TRAINING, "--ckpt-dir", str(tmp_path / "cpp"), "--steps", "30",
                            "--every", "10", "--step-ms", "20"], env=env, capture_output=True,
                           text=True, timeout=300)
        assert r.returncode == 0, r.stdout + r.stderr
        points = losses_of(stintd, job, 2)
        for step, loss, _, _ in points:
            assert 0 < step <= 30 and 0 < loss < 100, points
    finally:
        stintd.stop()


# A loop through stint.Resumable that gets a notice at step 5 (its own
# watcher, as a signal would): the emergency checkpoint, then exit 75.
NOTICED = r"""
import sys, torch, stint
model = torch.nn.Linear(4, 4)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
run = stint.Resumable(sys.argv[1], model=model, optimizer=opt, save_every=0)
step = run.resume()
while True:
    opt.step()
    step += 1
    if step == 5:
        run.watcher.notify("test", 60)
    if run.step_boundary(step):
        break
print("figure", run.notice_to_replicas_seconds, flush=True)
run.close()
sys.exit(run.exit_code)
"""


def segment_figure(stintd, job, deadline_s=30):
    """The job's segment's notice_to_replicas_seconds once reported."""
    deadline = time.monotonic() + deadline_s
    while True:
        seg = stintd.call("GET", "/v1/jobs/%d" % job)["segments"][0]
        if seg["notice_to_replicas_seconds"] is not None:
            return seg
        assert time.monotonic() < deadline, seg
        time.sleep(0.05)


def test_an_emergency_checkpoint_reports_notice_to_replicas_to_stintd(tmp_path, python_env):
    stintd = Stintd(str(tmp_path))
    try:
        job = stintd.running_job(gpus=1)
        env = worker_env(stintd, job, python_env)
        r = subprocess.run([sys.executable, "-c", NOTICED, str(tmp_path / "ckpt")], env=env,
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 75, r.stdout + r.stderr
        figure = float(r.stdout.split("figure ")[1].split()[0])
        seg = segment_figure(stintd, job)
        assert seg["notice_to_replicas_seconds"] == pytest.approx(figure), (seg, r.stdout)
        assert seg["checkpoint_step"] == 5, seg
        assert stintd.call("GET", "/v1/jobs/%d" % job)["checkpoint_step"] == 5
    finally:
        stintd.stop()


@pytest.mark.skipif(not RESUMABLE_TRAINING, reason="$STINT_RESUMABLE_TRAINING is not set")
def test_resumable_training_cpp_reports_notice_to_replicas_to_stintd(tmp_path, python_env):
    stintd = Stintd(str(tmp_path))
    try:
        job = stintd.running_job(gpus=1)
        env = worker_env(stintd, job, python_env)
        p = subprocess.Popen([RESUMABLE_TRAINING, "--ckpt-dir", str(tmp_path / "cpp"),
                              "--steps", "100000", "--every", "0", "--step-ms", "20"],
                             env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            # Training, as its heartbeats say: then the notice.
            deadline = time.monotonic() + 120
            while stintd.call("GET", "/v1/jobs/%d" % job)["last_step"] < 3:
                assert p.poll() is None and time.monotonic() < deadline, p.stdout.read()
                time.sleep(0.05)
            p.send_signal(signal.SIGTERM)
            out, _ = p.communicate(timeout=120)
        finally:
            if p.poll() is None:
                p.kill()
        assert p.returncode == 75, out
        seg = segment_figure(stintd, job)
        assert seg["notice_to_replicas_seconds"] >= 0 and seg["checkpoint_step"] >= 3, seg
    finally:
        stintd.stop()


def test_an_elastic_workers_report_loss_reaches_the_curve(tmp_path):
    import stint
    stintd = Stintd(str(tmp_path))
    try:
        job = stintd.running_job(gpus=1)
        import stint.elastic
        worker = stint.elastic.ElasticWorker(stintd.url, WORKER, job)
        worker.start()
        try:
            worker.set_step(7)
            worker.report_loss(0.25, samples=448)
            deadline = time.monotonic() + 30
            while True:
                j = stintd.call("GET", "/v1/jobs/%d" % job)
                points = stintd.call("GET", "/v1/jobs/%d/losses" % job)["points"]
                if points and j["samples"] == 448:
                    break
                assert time.monotonic() < deadline, (j, points)
                time.sleep(0.05)
            assert points[0][:2] == [7, 0.25]
        finally:
            worker.close()
    finally:
        stintd.stop()
