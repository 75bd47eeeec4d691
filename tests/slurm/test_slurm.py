"""stint on a real Slurm 22.05 cluster (tools/slurm/cluster.sh: a private
munged, slurmctld and three `slurmd -N` nodes of four fake GPUs on this
host), through the public surfaces: `stint slurm submit` and a training job
of one srun task per GPU whose stint.Resumable does the rest.

Slurm checks time limits and --signal every 30 s, so these tests take
minutes; every wait has a deadline derived from that cadence.
"""

import os
import subprocess
import sys
import time

import pytest

from conftest import digests, lines, run, slurm_cluster, tool

HERE = os.path.dirname(os.path.abspath(__file__))
JOB = os.path.join(HERE, "resumable_job.py")
SLURM_TICK = 30  # seconds between Slurm's time-limit and --signal checks
JOB_DEADLINE = 900  # seconds for a job's whole life, requeues included (a loaded 2-core host)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """3 nodes x 4 GPUs, fresh for this module."""
    with slurm_cluster(tmp_path_factory, nodes=3, gpus=4) as (env, _):
        yield env


def _submit(env, root, out, total, step_seconds, *sbatch, lead=None, parallel="ddp", fault=""):
    """`stint slurm submit` of resumable_job.py (DDP, or FSDP2 state with
    parallel="fsdp"; a FAULT of resumable_job.py), sbatch's options in the
    short forms users type; returns the job id. The batch script goes to the
    root, and `submit` says so."""
    os.makedirs(out, exist_ok=True)
    args = [tool("STINT_CLI"), "slurm", "submit", "--root", root, "--gpus-per-node", "2",
            "-N2", "-o", os.path.join(out, "log")]
    if lead is not None:
        args += ["--lead", str(lead)]
    args += list(sbatch) + ["--", sys.executable, JOB, root, out, str(total), str(step_seconds),
                            parallel] + ([fault] if fault else [])
    said = run(env, *args, cwd=out)
    assert said.startswith("submitted Slurm job "), said
    job = said.split()[3]
    script = said.split("(batch script ")[1].rstrip(")\n")
    assert os.path.dirname(script) == root and os.path.exists(script), said
    assert not [n for n in os.listdir(out) if n.endswith(".sh")], said  # not in the caller's directory
    return job


def _state(env, job):
    """The job's state as squeue says (finished jobs stay listed: MinJobAge), and its reason."""
    line = run(env, "squeue", "-h", "-t", "all", "-j", job, "-o", "%T %r").strip()
    state, _, reason = line.partition(" ")
    return state, reason


def _follow(env, job, out, deadline):
    """Waits for the job to end; a requeued job is released at once (Slurm
    holds a requeue about 120 s). Returns (final state, times released)."""
    released = 0
    final_since = None
    while True:
        state, reason = _state(env, job)
        # A job being requeued passes through CANCELLED ("due to job
        # requeue") on its way back to PENDING: final only once it stays.
        if state in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY"):
            final_since = final_since or time.monotonic()
            if time.monotonic() - final_since >= 10:
                return state, released
        else:
            final_since = None
        if state == "PENDING" and reason == "BeginTime":
            run(env, "scontrol", "update", "JobId=" + job, "StartTime=now")
            released += 1
        if time.monotonic() > deadline:
            log = open(os.path.join(out, "log")).read() if os.path.exists(os.path.join(out, "log")) else ""
            pytest.fail("job %s still %s (%s) at its deadline; log:\n%s" % (job, state, reason, log[-4000:]))
        time.sleep(1)


def _preempt(env, job, root, out, tmp_path, deadline):
    """Once the job trains (a checkpoint is committed), a high-partition job
    that needs two whole nodes preempts it (the low partition is
    preemptible: PreemptMode=REQUEUE, GraceTime); returns the high job's id
    once the job is pending again, its tasks' stops written."""
    while not lines(os.path.join(out, "starts")) or not any(
            n.startswith("step-") for n in (os.listdir(root) if os.path.isdir(root) else [])):
        assert time.monotonic() < deadline, open(os.path.join(out, "log")).read()
        time.sleep(1)
    high = run(env, "sbatch", "--parsable", "--partition=high", "--nodes=2", "--exclusive",
               "--gres=gpu:4", "--time=30", "-o", os.path.join(str(tmp_path), "high.log"),
               "--wrap", "sleep 1200").strip()
    while _state(env, job)[0] != "PENDING" or not lines(os.path.join(out, "stops")):
        if time.monotonic() > deadline:
            subprocess.run(["scancel", high], env=env, timeout=60)
            pytest.fail(open(os.path.join(out, "log")).read()[-4000:])
        time.sleep(1)
    return high


def test_a_preempted_job_checkpoints_requeues_and_resumes_bit_exactly(cluster, tmp_path):
    """2 nodes x 2 GPUs, Gloo, FSDP2 state (each rank checkpoints its shards
    of the parameters and the momentum), one srun task per GPU, submitted
    with sbatch's short options. Preempted once it trains: all stop at one
    step with one checkpoint in the grace and exit 75 but rank 1, which dies
    of SIGABRT (a crash in its teardown); the stop the tasks recorded makes
    the batch script requeue all the same, and the next run resumes there.
    Later runs are warned by --signal=USR1@120 before their --time=3 ends,
    stop and requeue the same way. It ends bit-identical to an uninterrupted
    run of the same job, and a requeue of the completed job does nothing."""
    total, step_seconds = 700, 0.1
    ref_root, ref_out = str(tmp_path / "ref-root"), str(tmp_path / "ref")
    root, out = str(tmp_path / "root"), str(tmp_path / "run")
    start = time.monotonic()
    # The reference first: nothing of it to preempt when the job is.
    ref = _submit(cluster, ref_root, ref_out, total, 0.0, "--time=30", parallel="fsdp")
    assert _follow(cluster, ref, ref_out, start + JOB_DEADLINE / 3)[0] == "COMPLETED"
    job = _submit(cluster, root, out, total, step_seconds, "-t", "3", lead=120, parallel="fsdp",
                  fault="abort-after-stop")
    high = _preempt(cluster, job, root, out, tmp_path, start + JOB_DEADLINE / 2)
    run(cluster, "scancel", high)

    state, released = _follow(cluster, job, out, start + JOB_DEADLINE)
    log = open(os.path.join(out, "log")).read()
    assert state == "COMPLETED", log[-4000:]

    starts, stops = lines(os.path.join(out, "starts")), lines(os.path.join(out, "stops"))
    restarts = sorted({int(s["restart"]) for s in starts})
    assert len(restarts) >= 2 and released >= 1, (starts, stops)
    # Every stop: all four ranks at one step, on Slurm's notice, durable there;
    # the next run resumed every rank at that step.
    for restart in restarts[:-1]:
        mine = [s for s in stops if int(s["restart"]) == restart]
        at = {int(s["step"]) for s in mine}
        assert len(at) == 1 and len(mine) == 4, stops
        assert all(int(s["durable"]) == int(s["step"]) for s in mine), stops
        # The preemption's signal (preempt_send_user_signal: the job's --signal
        # in place of the grace's first SIGTERM), Slurm's warning, the end
        # time, or (a rank whose boundary came first) agreement.
        assert {s["source"] for s in mine} <= {
            "signal_SIGUSR1", "signal_SIGTERM", "Slurm_time_limit",
            "preemption_notice_on_another_rank"}, stops
        resumed = {int(s["step"]) for s in starts if int(s["restart"]) == restart + 1}
        assert resumed == at, (starts, stops)
    assert "stint: requeueing Slurm job %s" % job in log
    assert "after this run's stop was recorded (slurm_job=%s restart=0 step=" % job in log, log[-4000:]
    assert digests(out, 4) == digests(ref_out, 4)
    assert len(set(digests(out, 4))) == 1

    # The root knows who finished it; a requeue of the finished job runs nothing.
    status = run(cluster, tool("STINT_CLI"), "slurm", "status", job, "--root", root)
    assert "complete at step %d" % total in status and '"slurm_job_id":"%s"' % job in status, status
    run(cluster, "scontrol", "requeue", job)
    state, _ = _follow(cluster, job, out, time.monotonic() + 10 * SLURM_TICK)
    assert state == "COMPLETED"
    assert "the run is complete, nothing to do" in open(os.path.join(out, "log")).read()
    assert lines(os.path.join(out, "starts")) == starts  # no task started again


def test_a_task_that_crashes_before_any_stop_fails_the_job_and_is_not_requeued(cluster, tmp_path):
    """Rank 1 dies of SIGABRT at step 30, before any notice (after the
    periodic save at step 20): no stop was decided, so the job ends FAILED and is
    not requeued, even with the root holding the record of a stop of the
    same job's restart 1 (stale: this is restart 0). Submitted held (-H), so
    the record is in place before it runs."""
    root, out = str(tmp_path / "root"), str(tmp_path / "run")
    start = time.monotonic()
    job = _submit(cluster, root, out, 400, 0.05, "-H", "-t", "30", fault="abort-at-30")
    with open(os.path.join(root, "REQUEUE"), "w") as f:
        f.write("slurm_job=%s restart=1 step=20 durable=20\n" % job)
    run(cluster, "scontrol", "release", job)
    state, released = _follow(cluster, job, out, start + JOB_DEADLINE / 3)
    log = open(os.path.join(out, "log")).read()
    assert state == "FAILED" and released == 0, log[-4000:]
    assert "stint: the tasks exited " in log and "requeueing" not in log, log[-4000:]
    assert {int(s["restart"]) for s in lines(os.path.join(out, "starts"))} == {0}
    assert " Restarts=0 " in run(cluster, "scontrol", "show", "job", job)


def test_a_preempted_job_checkpoints_in_its_grace_and_resumes_on_fewer_nodes(cluster, tmp_path):
    """The low partition is preemptible (PreemptMode=REQUEUE, GraceTime):
    a high-partition job that needs two whole nodes preempts the low job of
    2 nodes x 2 GPUs. Its tasks get SIGTERM at once, stop at one step with a
    checkpoint inside the grace and exit 75 (rank 1 dies of SIGABRT after
    it instead); the job is requeued and, with --nodes=1-2, resumes on the
    one node left (world 4 -> 2) at that step, then finishes with every
    sample of each epoch seen exactly once. Its name, with blanks, '#' and
    quotes, reaches Slurm whole."""
    total, step_seconds = 400, 0.1
    root, out = str(tmp_path / "root"), str(tmp_path / "run")
    start = time.monotonic()
    name = 'low #2 "preempted"'
    job = _submit(cluster, root, out, total, step_seconds, "--nodes", "1-2", "--time=30",
                  "-plow", "-J", name, fault="abort-after-stop")
    assert run(cluster, "squeue", "-h", "-j", job, "-o", "%j").strip() == name
    high = _preempt(cluster, job, root, out, tmp_path, start + JOB_DEADLINE / 2)
    try:
        # Slurm 22.05 requeues a job with the node, task and CPU counts of its
        # last allocation (--nodes=1-2 became 2): let it start on one node.
        run(cluster, "scontrol", "update", "JobId=" + job, "NumNodes=1", "NumTasks=2", "NumCPUs=2")
        state, released = _follow(cluster, job, out, start + JOB_DEADLINE)
        log = open(os.path.join(out, "log")).read()
        assert state == "COMPLETED", log[-4000:]
    finally:
        subprocess.run(["scancel", high], env=cluster, timeout=60)
    starts, stops = lines(os.path.join(out, "starts")), lines(os.path.join(out, "stops"))
    first = [s for s in stops if s["restart"] == "0"]
    assert len(first) == 4 and len({s["step"] for s in first}) == 1, stops
    # preempt_send_user_signal: Slurm sends the job's --signal (USR1) in place
    # of the grace's first SIGTERM.
    assert {s["source"] for s in first} <= {"signal_SIGUSR1", "signal_SIGTERM",
                                            "preemption_notice_on_another_rank"}, stops
    stopped_at = int(first[0]["step"])
    assert all(int(s["durable"]) == stopped_at for s in first), stops  # checkpointed in the grace
    second = [s for s in starts if s["restart"] == "1"]
    assert {int(s["world"]) for s in second} == {2} and {int(s["step"]) for s in second} == {stopped_at}
    assert "stint: requeueing Slurm job %s" % job in log
    assert len(set(digests(out, 2))) == 1  # the two ranks of the last run agree


def test_the_libtorch_example_under_srun_stops_requeues_itself_and_resumes_bit_exactly(
        cluster, tmp_path):
    """examples/resumable_training, 2 nodes x 2 tasks under a plain sbatch +
    srun (no stint script): stint::ResumableTraining forms the Gloo group
    from Slurm's variables. Warned with scancel --signal=USR1, every rank
    stops at one step with one checkpoint and rank 0 requeues the job
    itself (scontrol requeue); the next run resumes and ends with the same
    parameters as an uninterrupted run. A requeue of the completed job
    trains nothing and exits 0."""
    train = tool("STINT_RESUMABLE_TRAINING")

    def submit(name, *args):
        out = str(tmp_path / name)
        os.makedirs(out)
        command = "srun %s --ckpt-dir %s --steps 300 --every 50 %s" % (
            train, os.path.join(out, "ckpt"), " ".join(args))
        job = run(cluster, "sbatch", "--parsable", "--requeue", "--open-mode=append",
                  "--nodes=2", "--ntasks-per-node=2", "--gres=gpu:2", "--time=30",
                  "--output=" + os.path.join(out, "log"), "--wrap", command).strip()
        return job, out

    start = time.monotonic()
    ref, ref_out = submit("ref")
    job, out = submit("run", "--step-ms", "50")
    ckpt = os.path.join(out, "ckpt")
    while not any(n.startswith("step-") for n in (os.listdir(ckpt) if os.path.isdir(ckpt) else [])):
        log = os.path.join(out, "log")
        assert time.monotonic() < start + JOB_DEADLINE / 3, open(log).read() if os.path.exists(log) else ""
        time.sleep(0.5)
    run(cluster, "scancel", "--signal=USR1", job)
    state, released = _follow(cluster, job, out, start + JOB_DEADLINE)
    log = open(os.path.join(out, "log")).read()
    assert state == "COMPLETED" and released >= 1, log[-4000:]
    assert _follow(cluster, ref, ref_out, start + JOB_DEADLINE)[0] == "COMPLETED"

    preempted = [l for l in log.splitlines() if l.startswith("preempted at step ")]
    assert len(preempted) == 4 and len({l.split()[3] for l in preempted}) == 1, log[-4000:]
    stopped = preempted[0].split()[3].rstrip(":")
    resumed = [l for l in log.splitlines() if l.startswith("ready: resumed from step ")]
    assert {l.split()[4] for l in resumed[4:8]} == {stopped}, log[-4000:]
    assert "stint: requeued Slurm job %s (scontrol requeue)" % job in log
    checksum = lambda text: {l.split()[-1] for l in text.splitlines() if l.startswith("final step ")}
    want = checksum(open(os.path.join(ref_out, "log")).read())
    assert len(want) == 1 and checksum(log) == want, log[-4000:]
    assert '"slurm_job_id":"%s"' % job in open(os.path.join(ckpt, "COMPLETE")).read()

    run(cluster, "scontrol", "requeue", job)
    state, _ = _follow(cluster, job, out, time.monotonic() + 10 * SLURM_TICK)
    assert state == "COMPLETED"
    log = open(os.path.join(out, "log")).read()
    assert log.count("complete: the run finished at step 300, nothing to do") == 4, log[-4000:]
