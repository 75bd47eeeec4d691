"""stintd over a real Slurm 22.05 cluster (stintd --slurm): stintd keeps its
queue and policy, Slurm runs the segments, no stint-agent on Slurm's nodes
(one test adds a stint-agent node beside them). Three `slurmd -N` nodes of
two fake GPUs; training jobs of two ranks
(resumable_job.py through stint.Resumable, Gloo) submitted with stintctl.

Slurm runs each granted segment as a job bound to its node; stintd's notice
reaches the tasks through `scancel --signal`; the Slurm job's exit maps back
to stintd's queue. Every wait has a deadline; the jobs' output is in the
failure message.
"""

import glob
import json
import os
import subprocess
import sys
import time

import pytest

from conftest import digests, lines, run, slurm_cluster, tool

HERE = os.path.dirname(os.path.abspath(__file__))
JOB = os.path.join(HERE, "resumable_job.py")
TOTAL, STEP_SECONDS = 300, 0.1
DEADLINE = 900  # seconds for a test's jobs, restarts included (a loaded 2-core host)
ADMIN_TOKEN = "stint-slurm-test-admin-token"
AGENT_TOKEN = "stint-slurm-test-agent-token"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """3 nodes x 2 GPUs, and stintd --slurm over its "low" partition, whose
    node windows give 45 s of notice."""
    with slurm_cluster(tmp_path_factory, nodes=3, gpus=2) as (env, nodes):
        d = str(tmp_path_factory.mktemp("stintd"))
        env = dict(env, STINTD_ADMIN_TOKEN=ADMIN_TOKEN,
                   STINTD_WORKER_TOKEN="stint-slurm-test-worker-token",
                   STINTD_AGENT_TOKEN=AGENT_TOKEN)
        log = open(os.path.join(d, "stintd.log"), "w")
        # MASTER_PORTs of its own: other tests' stintds on this host use the
        # default range, and a segment whose rendezvous port is taken crashes.
        first_port = 25000 + (os.getpid() % 80) * 50
        stintd = subprocess.Popen(
            [tool("STINTD_BIN"), "--db", os.path.join(d, "stintd.db"), "--listen", "127.0.0.1:0",
             "--master-ports", "%d-%d" % (first_port, first_port + 49),
             "--slurm", "--slurm-partition", "low:45", "--slurm-poll-seconds", "1",
             "--min-run-seconds", "0", "--tick-seconds", "0.5"],
            env=env, stdout=subprocess.PIPE, stderr=log, text=True)
        try:
            line = stintd.stdout.readline()  # "stintd: listening on HOST:PORT" once it serves
            assert line.startswith("stintd: listening on "), line + open(log.name).read()
            env = dict(env, STINTD_URL="http://" + line.split()[-1], STINTD_TOKEN=ADMIN_TOKEN)
            yield env, nodes, log.name
        finally:
            stintd.terminate()
            stintd.wait(timeout=60)
            # The Slurm jobs it ran outlive it by design; the cluster's stop ends them.


def _ctl(env, *args):
    return json.loads(run(env, tool("STINTCTL_BIN"), "--json", *args))


def _submit(env, tmp_path, name, priority, total=TOTAL, pool="low"):
    root, out = str(tmp_path / (name + "-root")), str(tmp_path / name)
    os.makedirs(out)
    job = _ctl(env, "jobs", "submit", "--name", name, "--gpus", "2", "--pool", pool,
               "--priority", priority, "--signal", "TERM", "--",
               sys.executable, JOB, root, out, str(total), str(STEP_SECONDS))
    return job["id"], root, out


def _job(env, job):
    return _ctl(env, "jobs", "show", str(job))


def _why(env, log, *outs):
    """The coordinator's log, the Slurm daemons' errors and the jobs' Slurm
    output, for a failure."""
    text = "stintd:\n" + open(log).read()[-3000:]
    for f in sorted(glob.glob(os.path.join(os.path.dirname(env["SLURM_CONF"]), "log", "slurm*.log"))):
        errors = [l for l in open(f, errors="replace") if "error" in l.lower()]
        text += "\n--- errors in %s\n%s" % (f, "".join(errors[-10:]))
    for f in sorted(glob.glob(os.path.join(os.path.dirname(log), "stintd.db.slurm", "job-*", "*.log"))):
        text += "\n--- %s\n%s" % (f, open(f).read()[-2000:])
    for out in outs:
        for name in ("starts", "stops"):
            p = os.path.join(out, name)
            text += "\n--- %s\n%s" % (p, open(p).read() if os.path.exists(p) else "(none)")
    return text


def _wait(what, cond, deadline, why):
    while not cond():
        if time.monotonic() > deadline:
            pytest.fail("%s not reached in time\n%s" % (what, why()))
        time.sleep(1)


def _committed_steps(root):
    return sorted(int(n[len("step-"):]) for n in (os.listdir(root) if os.path.isdir(root) else [])
                  if n.startswith("step-") and n[len("step-"):].isdigit())


def _open_nodes(env):
    return {n["name"] for n in _ctl(env, "nodes")["nodes"]
            if n["open"] and not n["window"].get("closed_early")}


def _reference_and_job(cluster, tmp_path, name):
    """Once all three nodes lend windows: an uninterrupted reference job and
    the job under test (`name`), both MEDIUM. Returns (start time, the
    reference's job id and output dir, the job's id, root and output dir,
    why())."""
    env, nodes, log = cluster
    start = time.monotonic()
    _wait("three open Slurm windows", lambda: _open_nodes(env) == set(nodes), start + 60,
          lambda: _why(env, log))
    ref, _, ref_out = _submit(env, tmp_path, "reference", "MEDIUM")
    job, root, out = _submit(env, tmp_path, name, "MEDIUM")
    return start, ref, ref_out, job, root, out, lambda: _why(env, log, out, ref_out)


def test_stintd_preempts_through_slurm_and_the_lower_job_resumes_bit_exactly(cluster, tmp_path):
    """Two nodes lend windows (the third is drained). A LOW and a MEDIUM
    job of 2 GPUs each run as Slurm jobs; a HIGH job then preempts the LOW
    one: its tasks get SIGTERM through scancel --signal, checkpoint, exit
    75, and stintd queues it again; once HIGH finished, LOW resumes at its
    checkpoint and ends bit-identical to MEDIUM, the same training never
    interrupted."""
    env, nodes, log = cluster
    run(env, "scontrol", "update", "NodeName=" + nodes[2], "State=DRAIN", "Reason=kept-for-node-down-test")
    start = time.monotonic()
    why = lambda: _why(env, log)
    _wait("two open Slurm windows", lambda: _open_nodes(env) == set(nodes[:2]), start + 60, why)
    listed = _ctl(env, "nodes")["nodes"]
    assert {n["executor"] for n in listed} == {"slurm"}, listed
    # The partition's own notice lead (--slurm-partition low:45).
    assert {n["window"]["notice_lead_seconds"] for n in listed if n["open"]} == {45}, listed

    medium, _, medium_out = _submit(env, tmp_path, "medium", "MEDIUM")
    low, low_root, low_out = _submit(env, tmp_path, "low", "LOW")
    why = lambda: _why(env, log, low_out, medium_out)
    _wait("a checkpoint of the LOW job", lambda: _committed_steps(low_root), start + DEADLINE / 3, why)
    high, _, high_out = _submit(env, tmp_path, "high", "HIGH", total=40)
    why = lambda: _why(env, log, low_out, medium_out, high_out)
    _wait("all three jobs DONE",
          lambda: all(_job(env, j)["state"] == "DONE" for j in (low, medium, high)),
          start + DEADLINE, why)

    # LOW: stopped once on stintd's notice (a rank whose boundary came first
    # agreed), both ranks at one step and durable there; resumed there.
    stops, starts = lines(os.path.join(low_out, "stops")), lines(os.path.join(low_out, "starts"))
    assert len(stops) == 2 and len({s["step"] for s in stops}) == 1, why()
    assert {s["source"] for s in stops} <= {"signal_SIGTERM", "preemption_notice_on_another_rank"}, why()
    stopped = int(stops[0]["step"])
    assert all(int(s["durable"]) == stopped for s in stops), why()
    segments = sorted({s["segment"] for s in starts}, key=int)
    assert len(segments) == 2, why()
    assert {int(s["step"]) for s in starts if s["segment"] == segments[1]} == {stopped}, why()
    assert digests(low_out, 2) == digests(medium_out, 2), why()
    assert len(set(digests(low_out, 2))) == 1

    # stintd's record: LOW's first segment preempted for HIGH, each segment a Slurm job.
    shown = _job(env, low)
    assert shown["preemptions"] == 1, shown
    first = [s for s in shown["segments"] if str(s["id"]) == segments[0]][0]
    assert first["notice_reason"] == "preempted", shown
    for s in shown["segments"]:
        assert s["external_id"].startswith("slurm:"), shown
        slurm_job = s["external_id"].split(":")[1]
        state = run(env, "squeue", "-h", "-t", "all", "-j", slurm_job, "-o", "%j %T").split()
        assert state[0] == "stint.stintd." + str(s["id"]), state
    assert not lines(os.path.join(medium_out, "stops"))  # MEDIUM ran through


def test_a_node_set_down_under_a_segment_requeues_it_elsewhere_with_nothing_lost(cluster, tmp_path):
    """A job runs on one node; the node is set DOWN (Slurm kills the job
    there: SIGTERM, SIGKILL after KillWait). stintd closes the node's window
    at once, queues the job again and Slurm runs it on another node, resumed
    at its newest checkpoint: it ends bit-identical to an uninterrupted run."""
    env, nodes, log = cluster
    run(env, "scontrol", "update", "NodeName=" + nodes[2], "State=RESUME")
    start, ref, ref_out, job, root, out, why = _reference_and_job(cluster, tmp_path, "down")
    _wait("checkpoints of the job", lambda: len(_committed_steps(root)) >= 2, start + DEADLINE / 3, why)
    seg = _job(env, job)["segments"][-1]
    slurm_job = seg["external_id"].split(":")[1]
    node = run(env, "squeue", "-h", "-j", slurm_job, "-o", "%N").strip()
    assert node in nodes, node
    before = _committed_steps(root)[-1]
    run(env, "scontrol", "update", "NodeName=" + node, "State=DOWN", "Reason=node-down-test")
    try:
        _wait("both jobs DONE", lambda: all(_job(env, j)["state"] == "DONE" for j in (job, ref)),
              start + DEADLINE, why)
    finally:
        run(env, "scontrol", "update", "NodeName=" + node, "State=RESUME")
    assert "node %s is DOWN" % node in open(log).read(), why()
    starts = lines(os.path.join(out, "starts"))
    segments = sorted({s["segment"] for s in starts}, key=int)
    assert len(segments) >= 2, why()
    resumed = {int(s["step"]) for s in starts if s["segment"] == segments[-1]}
    assert len(resumed) == 1 and resumed.pop() >= before, why()
    later = [s for s in _job(env, job)["segments"] if str(s["id"]) == segments[-1]][0]
    later_node = run(env, "squeue", "-h", "-t", "all", "-j", later["external_id"].split(":")[1],
                     "-o", "%N").strip()
    assert later_node != node, why()
    assert digests(out, 2) == digests(ref_out, 2), why()


def test_a_segment_that_slurm_preempts_for_another_partition_resumes_elsewhere(cluster, tmp_path):
    """Slurm itself preempts a stintd segment: another user's job in the
    higher partition takes its node (PreemptMode=REQUEUE, GraceTime). The
    tasks get SIGTERM, checkpoint within the grace and exit; the Slurm job
    (submitted --no-requeue) ends, stintd sees it within a poll, queues the
    job again and runs it on another node, resumed at its checkpoint, ending
    bit-identical to an uninterrupted run."""
    env, nodes, log = cluster
    start, ref, ref_out, job, root, out, why = _reference_and_job(cluster, tmp_path, "preempted")
    _wait("a checkpoint of the job", lambda: _committed_steps(root), start + DEADLINE / 3, why)
    first = _job(env, job)["segments"][-1]
    node = run(env, "squeue", "-h", "-j", first["external_id"].split(":")[1], "-o", "%N").strip()
    high = run(env, "sbatch", "--parsable", "--partition=high", "-w", node, "--exclusive",
               "--gres=gpu:2", "-o", "/dev/null", "--wrap", "sleep 600").strip()
    try:
        _wait("both jobs DONE", lambda: all(_job(env, j)["state"] == "DONE" for j in (job, ref)),
              start + DEADLINE, why)
    finally:
        subprocess.run(["scancel", high], env=env, timeout=60)
    stops, starts = lines(os.path.join(out, "stops")), lines(os.path.join(out, "starts"))
    assert len(stops) == 2 and len({s["step"] for s in stops}) == 1, why()
    assert {s["source"] for s in stops} <= {"signal_SIGTERM", "preemption_notice_on_another_rank"}, why()
    stopped = int(stops[0]["step"])
    assert all(int(s["durable"]) == stopped for s in stops), why()  # within the grace
    segments = sorted({s["segment"] for s in starts}, key=int)
    assert len(segments) == 2, why()
    assert {int(s["step"]) for s in starts if s["segment"] == segments[1]} == {stopped}, why()
    later = [s for s in _job(env, job)["segments"] if str(s["id"]) == segments[1]][0]
    assert run(env, "squeue", "-h", "-t", "all", "-j", later["external_id"].split(":")[1],
               "-o", "%N").strip() != node, why()
    assert "segment %d: Slurm job %s" % (first["id"], first["external_id"].split(":")[1]) in open(log).read()
    assert digests(out, 2) == digests(ref_out, 2), why()


def test_windows_a_stint_agent_lends_and_windows_slurm_gives_coexist_in_one_stintd(cluster, tmp_path):
    """A stint-agent beside Slurm lends its own node to the same stintd, in a
    pool of its own. stintctl nodes names who runs each node; a job in the
    agent's pool runs through the agent (no Slurm job) while a job in the
    Slurm partition's pool runs as a Slurm job, and both end with the same
    parameters (the same training)."""
    env, nodes, log = cluster
    work = str(tmp_path / "agent")
    os.makedirs(work)
    _ctl(env, "pools", "add", "agents")
    agent_log = open(os.path.join(work, "agent.log"), "w")
    agent = subprocess.Popen(
        [tool("STINT_AGENT_BIN"), "--coord", env["STINTD_URL"], "--pool", "agents", "--gpus", "0,1",
         "--node", "agent-node", "--addr", "127.0.0.1", "--for", "2h", "--heartbeat-seconds", "0.5",
         "--workdir", work],
        env=dict(env, STINT_AGENT_TOKEN=AGENT_TOKEN), stdout=agent_log, stderr=subprocess.STDOUT)
    try:
        start = time.monotonic()
        why = lambda: _why(env, log) + "\n--- agent\n" + open(agent_log.name).read()[-3000:]
        _wait("the agent's window and a Slurm window",
              lambda: "agent-node" in _open_nodes(env) and _open_nodes(env) & set(nodes),
              start + 60, why)
        executors = {n["name"]: n["executor"] for n in _ctl(env, "nodes")["nodes"]}
        assert executors["agent-node"] == "stint-agent", executors
        assert {executors[n] for n in nodes if n in executors} == {"slurm"}, executors
        total = 100
        by_agent, _, agent_out = _submit(env, tmp_path, "by-agent", "MEDIUM", total, pool="agents")
        by_slurm, _, slurm_out = _submit(env, tmp_path, "by-slurm", "MEDIUM", total)
        why = lambda: (_why(env, log, agent_out, slurm_out) + "\n--- agent\n" +
                       open(agent_log.name).read()[-3000:])
        _wait("both jobs DONE",
              lambda: all(_job(env, j)["state"] == "DONE" for j in (by_agent, by_slurm)),
              start + DEADLINE / 2, why)
        agent_segments = _job(env, by_agent)["segments"]
        slurm_segments = _job(env, by_slurm)["segments"]
        assert all(not s.get("external_id") for s in agent_segments), agent_segments
        assert all(s.get("external_id", "").startswith("slurm:") for s in slurm_segments), slurm_segments
        assert digests(agent_out, 2) == digests(slurm_out, 2), why()
    finally:
        agent.terminate()
        try:
            agent.wait(timeout=60)
        except subprocess.TimeoutExpired:
            agent.kill()
            agent.wait()
        agent_log.close()
