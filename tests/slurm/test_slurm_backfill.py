"""A job that lives in backfill holes (`--time-min`), on a real Slurm 22.05
cluster (tools/slurm/cluster.sh: 2 nodes x 4 fake GPUs), through `stint
slurm submit` and stint.Resumable.

A maintenance reservation five minutes ahead leaves a hole shorter than
the job's --time. Backfill starts the job there with a shorter limit (22.05
grants exactly --time-min, however long the hole); stint reads the real end
time at start, stops every rank at one step with a durable checkpoint before
it, the job requeues, fits the hole's rest the same way and finishes,
bit-identical to an uninterrupted run. (The reservation makes the first
start a backfill; the job needs about two runs and ends before it.)
"""

import os
import time

import pytest

from conftest import digests, lines, run, slurm_cluster
from test_slurm import JOB_DEADLINE, _state, _submit

RESERVATION_AHEAD, RESERVATION_MINUTES = 300, 1


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with slurm_cluster(tmp_path_factory, nodes=2, gpus=4) as (env, _):
        yield env


def test_a_job_with_time_min_trains_in_the_holes_before_a_reservation_and_finishes_bit_exactly(
        cluster, tmp_path):
    total, step_seconds = 900, 0.1
    ref_root, ref_out = str(tmp_path / "ref-root"), str(tmp_path / "ref")
    root, out = str(tmp_path / "root"), str(tmp_path / "run")
    start = time.monotonic()
    # The reference fits before the reservation, whenever it starts.
    ref = _submit(cluster, ref_root, ref_out, total, 0.0, "--time=4")
    run(cluster, "scontrol", "create", "reservation", "ReservationName=stint-maint",
        "StartTime=now+%d" % RESERVATION_AHEAD, "Duration=%d" % RESERVATION_MINUTES,
        "Nodes=ALL", "Users=root", "Flags=MAINT,IGNORE_JOBS")
    # Two minutes: a run's restart (25-30 s on a loaded 2-core host) and its
    # 30 s lead leave about a minute of training in each.
    job = _submit(cluster, root, out, total, step_seconds, "--time=10", "--time-min=2", lead=30)

    # Follow the job: the limit Slurm gave each run, requeues released at
    # once (Slurm holds a requeue about 120 s).
    limits, final_since = [], None
    while True:
        state, reason = _state(cluster, job)
        if state == "RUNNING":
            limit = run(cluster, "squeue", "-h", "-j", job, "-o", "%l").strip()
            if not limits or limits[-1] != limit:
                limits.append(limit)
        if state in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL"):
            final_since = final_since or time.monotonic()
            if time.monotonic() - final_since >= 10:
                break
        else:
            final_since = None
        if state == "PENDING" and reason == "BeginTime":
            run(cluster, "scontrol", "update", "JobId=" + job, "StartTime=now")
        if time.monotonic() > start + JOB_DEADLINE:
            pytest.fail("job %s still %s (%s); limits %s; log:\n%s" % (
                job, state, reason, limits, open(os.path.join(out, "log")).read()[-4000:]))
        time.sleep(1)
    log = open(os.path.join(out, "log")).read()
    why = "limits %s\n%s" % (limits, log[-4000:])
    assert state == "COMPLETED", why
    while _state(cluster, ref)[0] not in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"):
        assert time.monotonic() < start + JOB_DEADLINE, "reference %s: %s" % (ref, _state(cluster, ref))
        time.sleep(1)
    assert _state(cluster, ref)[0] == "COMPLETED", why

    # Backfill started it in the hole with its --time-min (nothing longer
    # fitted); 22.05 grants exactly that later too, even with time free.
    assert limits[0] == "2:00" and set(limits) <= {"2:00", "10:00"}, why
    starts, stops = lines(os.path.join(out, "starts")), lines(os.path.join(out, "stops"))
    restarts = sorted({int(s["restart"]) for s in starts})
    assert len(restarts) >= 2, (starts, stops, why)
    for restart in restarts[:-1]:
        mine = [s for s in stops if int(s["restart"]) == restart]
        at = {int(s["step"]) for s in mine}
        # Every rank at one step, durable there, before Slurm's end.
        assert len(mine) == 4 and len(at) == 1, stops
        assert all(int(s["durable"]) == int(s["step"]) for s in mine), stops
        assert {s["source"] for s in mine} <= {"signal_SIGUSR1", "Slurm_time_limit",
                                                "preemption_notice_on_another_rank"}, stops
        began = {int(s["step"]) for s in starts if int(s["restart"]) == restart}
        assert at.pop() > began.pop(), (starts, stops)  # useful work after its restart
    assert digests(out, 4) == digests(ref_out, 4)
    # What each fragment did: its limit, steps, and seconds from its start line to its stop.
    for restart in restarts:
        s = [x for x in starts if int(x["restart"]) == restart][0]
        e = [x for x in stops if int(x["restart"]) == restart]
        print("restart %d: from step %s%s" % (restart, s["step"], " to step %s in %.1f s (%s)" % (
            e[0]["step"], float(e[0]["at"]) - float(s["at"]), e[0]["source"]) if e else " to the end"))
    print("limits", limits)
