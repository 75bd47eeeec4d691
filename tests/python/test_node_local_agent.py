"""A job on node-local roots under stintd and stint-agent (issue 42): two
agents (nodes n1 and n2, one GPU each), a 2-GPU FSDP2 job whose ranks each
keep their checkpoints in their own node's root ($STINT_NODE_ID, which the
agent sets to its --node) and replicate them to the other node
(tools/fault_campaign.py's worker, state "fsdp", --replicate).

Node n2 is lost at a random point of a save or its replication: its agent
and its worker SIGKILLed, its root deleted. stintd sees the node go (its
TTL), ends the segment, and places the job again on n1 and a new node n3
with an empty root. Both ranks load the same step, at least the newest one
both nodes had replicated before n2 went, n2's part read from n1's replica,
bit-identical to what was saved (the worker exits 3 otherwise), and the job
runs to its end.

Needs stintd and stint-agent ($STINTD_PATH); skipped without them.
"""

import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest

from test_elastic import REPO, STINTD, Stintd

pytestmark = pytest.mark.skipif(not os.path.exists(STINTD),
                                reason="stintd is not built ($STINTD_PATH)")

CAMPAIGN = os.path.join(REPO, "tools", "fault_campaign.py")
AGENT_TOKEN = "test-agent-token"
# Two workers importing torch on a loaded 2-core machine, a node's TTL, a
# restart, and twelve saves: far above what it takes.
DEADLINE = 300.0
STEPS = 12


def events(path):
    try:
        with open(path) as f:
            return f.read()
    except FileNotFoundError:
        return ""


def test_stintd_moves_a_job_that_lost_a_node_and_it_resumes_from_peer_replicas(
        tmp_path, monkeypatch, python_env):
    agent_binary = os.path.join(os.path.dirname(os.path.dirname(STINTD)), "stint-agent",
                                "stint-agent")
    if not os.path.exists(agent_binary):
        pytest.skip("stint-agent is not built next to stintd")
    monkeypatch.setenv("STINTD_AGENT_TOKEN", AGENT_TOKEN)
    first_port = 31000 + (os.getpid() % 250) * 8  # apart from other stintds on this host
    daemon = Stintd(str(tmp_path), args=["--node-ttl-seconds", "3", "--min-run-seconds", "0",
                                         "--master-ports",
                                         "%d-%d" % (first_port, first_port + 7)])
    agents = {}

    def start_agent(node):
        log = open(tmp_path / (node + ".log"), "w")
        agents[node] = subprocess.Popen(
            [agent_binary, "--coord", daemon.url, "--pool", "p", "--gpus", "0", "--node", node,
             "--spot", "--addr", "127.0.0.1", "--heartbeat-seconds", "0.2",
             "--workdir", str(tmp_path / ("agent-" + node))],
            env=dict(os.environ, STINT_AGENT_TOKEN=AGENT_TOKEN), stdout=log,
            stderr=subprocess.STDOUT)
        log.close()

    ev = tmp_path / "events"
    ev.mkdir()
    base = tmp_path / "roots"

    def rank_events(segment, node=None):
        """{(node, rank): events} of a segment's ranks (of one node)."""
        out = {}
        for name in os.listdir(ev):
            m = re.match(r"seg(\d+)-(\w+)-r(\d+)\.events$", name)
            if m and int(m.group(1)) == segment and node in (None, m.group(2)):
                out[(m.group(2), int(m.group(3)))] = events(os.path.join(ev, name))
        return out

    def job_state(job):
        return daemon.call("GET", "/v1/jobs/%d" % job)

    def wait_until(what, predicate, deadline):
        while True:
            v = predicate()
            if v:
                return v
            for node, a in agents.items():
                assert a.poll() is None or node == "n2", "agent %s exited %s" % (node, a.returncode)
            if time.monotonic() > deadline:
                pytest.fail("no %s within the deadline; job: %r" % (what, job_state(job)))
            time.sleep(0.1)

    try:
        daemon.call("POST", "/v1/pools", {"name": "p"})
        start_agent("n1")
        start_agent("n2")
        cmd = ("exec %s %s worker --root %s/root-$STINT_NODE_ID "
               "--events %s/seg$STINT_SEGMENT_ID-$STINT_NODE_ID-r$RANK.events "
               "--state fsdp --steps %d --pause 0.3 --replicate"
               % (sys.executable, CAMPAIGN, base, ev, STEPS))
        job = daemon.call("POST", "/v1/jobs", {
            "name": "node-local", "pool": "p", "min_gpus": 2, "max_gpus": 2,
            "checkpoint_seconds": 1, "restart_seconds": 0,
            "launch": {"command": ["/bin/sh", "-c", cmd], "gpus_per_worker": 1,
                       "env": {"PYTHONPATH": python_env["PYTHONPATH"],
                               "OMP_NUM_THREADS": "1"}}})["id"]
        deadline = time.monotonic() + DEADLINE
        seg1 = wait_until("a running segment", lambda: job_state(job)["state"] == "RUNNING" and
                          job_state(job)["segments"][-1]["id"], deadline)
        wait_until("step 2 replicated on both nodes", lambda: len(rank_events(seg1)) == 2 and all(
            "replicated 2 " in e for e in rank_events(seg1).values()), deadline)
        seed = int(os.environ.get("STINT_TEST_SEED", time.time_ns() % 100000))
        rng = random.Random(seed)
        point = "%s %d " % (rng.choice(["saving", "durable", "replicated"]), rng.randint(3, 5))
        wait_until("node n2 at '%s' (seed %d)" % (point, seed), lambda: any(
            point in e for e in rank_events(seg1, "n2").values()), deadline)
        # Node n2 goes: its agent, its worker, its disk.
        agents["n2"].kill()
        for e in rank_events(seg1, "n2").values():
            pid = int(re.search(r"^start pid (\d+)", e, re.M).group(1))
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        survived = max(s for s in range(2, STEPS + 1)
                       if all("replicated %d " % s in e for e in rank_events(seg1).values()))
        shutil.rmtree(base / "root-n2")
        start_agent("n3")

        final = wait_until("the job's end", lambda: job_state(job)["state"] in
                           ("DONE", "FAILED", "CANCELLED") and job_state(job), deadline)
        seg2 = final["segments"][-1]["id"]
        resumed = rank_events(seg2)
        logs = "seed %d, n2 lost at '%s'; job %r\n%s" % (seed, point, final, "\n".join(
            "--- %s rank %d\n%s" % (n, r, e) for (n, r), e in sorted(resumed.items())))
        assert final["state"] == "DONE", logs
        assert sorted(n for n, _ in resumed) == ["n1", "n3"], logs
        loaded = [re.search(r"^loaded (\d+) (\S+)", e, re.M) for e in resumed.values()]
        assert all(m is not None and m.group(2) == "ok" for m in loaded), logs
        steps = {int(m.group(1)) for m in loaded}
        assert len(steps) == 1 and steps.pop() >= survived, logs
        assert all("exit 0" in e for e in resumed.values()), logs
    finally:
        for a in agents.values():
            if a.poll() is None:
                a.send_signal(signal.SIGTERM)
                a.wait(timeout=30)
        daemon.stop()
