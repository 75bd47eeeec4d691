"""The fault campaign's coordinator faults (tools/fault_campaign.py):
stintd and two stint-agents, the job's ranks run by an agent.

  stintd_kill  kill -9 of stintd while the ranks commit, then stintd
               restarted on its database
  partition    the agent running the job stopped (SIGSTOP) past its node's
               lease while stintd requeues the job on a second agent, then
               SIGCONT: the old segment's workers keep saving, and none of
               their commits may land
"""

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

from fault_util import end as _end, free_port, read_events, wall as _wall

KINDS = ["stintd_kill", "partition"]
ADMIN, WORKER, AGENT = "campaign-admin-token", "campaign-worker-token", "campaign-agent-token"
# The script whose `worker` subcommand the agents launch.
CAMPAIGN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fault_campaign.py")


class Coordinator:
    """stintd and two stint-agents (nodes n1, n2, 4 GPUs each) for the faults
    that need the coordinator; the job's ranks run the worker through the
    agent, so their commits are fenced by the registration it gives them."""

    def __init__(self, campaign):
        self.c = campaign
        self.dir = tempfile.mkdtemp(prefix="coord-", dir=campaign.work)
        self.port = free_port()
        self.url = "http://127.0.0.1:%d" % self.port
        self.env = dict(campaign.env, STINTD_ADMIN_TOKEN=ADMIN, STINTD_WORKER_TOKEN=WORKER,
                        STINTD_AGENT_TOKEN=AGENT)
        self.stintd = None
        self.agents = {}

    def __enter__(self):
        self.start_stintd()
        self.call("POST", "/v1/pools", {"name": "gpu"})
        return self

    def __exit__(self, *exc):
        for a in self.agents.values():
            _end(a, signal.SIGCONT)
        if self.stintd is not None:
            _end(self.stintd)
        return False

    def start_stintd(self):
        log = open(os.path.join(self.dir, "stintd.log"), "a")
        self.stintd = subprocess.Popen(
            [self.c.stintd_bin, "--listen", "127.0.0.1:%d" % self.port,
             "--db", os.path.join(self.dir, "stintd.db"), "--tick-seconds", "0.05",
             "--lease-ttl-seconds", "4", "--node-ttl-seconds", "3", "--start-grace-seconds", "60",
             "--min-run-seconds", "0", "--safety-seconds", "1",
             # Not the default 29500-29999 that other stintds on this host
             # (tests running beside the campaign) hand out too: a segment's
             # TCPStore failing with EADDRINUSE is not a fault under test.
             "--master-ports", "%d-%d" % _master_ports()],
            env=self.env, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        deadline = time.monotonic() + 30
        while True:
            try:
                self.call("GET", "/v1/jobs")
                return
            except OSError:
                if self.stintd.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("stintd did not start: see %s" % self.dir)
                time.sleep(0.05)

    def start_agent(self, node):
        token = os.path.join(self.dir, "agent.token")
        with open(token, "w") as f:
            f.write(AGENT + "\n")
        log = open(os.path.join(self.dir, "agent-%s.log" % node), "a")
        self.agents[node] = subprocess.Popen(
            [self.c.agent_bin, "--coord", self.url, "--token-file", token, "--pool", "gpu",
             "--gpus", "0,1,2,3", "--node", node, "--heartbeat-seconds", "0.2", "--spot", "--addr", "127.0.0.1",
             "--workdir", os.path.join(self.dir, "agent-" + node)],
            env=self.env, stdout=log, stderr=subprocess.STDOUT)
        log.close()

    def call(self, method, path, body=None):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method, headers={
            "Authorization": "Bearer " + ADMIN, "Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=10) as r:
            return json.loads(r.read().decode())

    def job(self, job):
        return self.call("GET", "/v1/jobs/%d" % job)

    def wait_for(self, what, cond, seconds=90):
        deadline = time.monotonic() + seconds
        while True:
            try:
                v = cond()
            except OSError:
                v = None
            if v:
                return v
            if time.monotonic() > deadline:
                self.c.fail("no %s within %d s (see %s)" % (what, seconds, self.dir))
                return None
            time.sleep(0.05)

    def submit(self, root, state, world, steps, events_dir):
        cmd = ("exec %s %s worker --root %s --events %s/seg$STINT_SEGMENT_ID-r$RANK.events "
               "--state %s --steps %d --pause 0.3" % (sys.executable, CAMPAIGN, root, events_dir, state, steps))
        env = {"PYTHONPATH": self.c.env["PYTHONPATH"], "OMP_NUM_THREADS": "1"}
        return self.call("POST", "/v1/jobs", {
            "name": "campaign", "pool": "gpu", "min_gpus": world, "checkpoint_seconds": 1,
            "restart_seconds": 0,
            "launch": {"command": ["/bin/sh", "-c", cmd], "env": env, "gpus_per_worker": 1}})["id"]

    def fault(self, kind, root, state, label):
        world = self.c.rng.randint(2, 4)
        events = os.path.join(self.c.work, label + "-events")
        os.makedirs(events)
        self.start_agent("n1")
        steps = 400 if kind == "partition" else 8
        job = self.submit(root, state, world, steps, events)
        self.c.runs += 1
        seg1 = self.wait_for("running segment of job %d" % job,
                             lambda: self.job(job)["state"] == "RUNNING" and self.job(job)["segments"][-1]["id"])
        if seg1 is None:
            return

        def seg_events(seg, r):
            return read_events(os.path.join(events, "seg%s-r%d.events" % (seg, r)))

        def durable(seg):
            return [int(e[1]) for e in seg_events(seg, 0) if e[0] == "durable"]

        if not self.wait_for("first durable step of segment %s" % seg1, lambda: durable(seg1), 150):
            return
        if kind == "stintd_kill":
            # Mid-commit: right after a rank announced a save.
            nth = len([e for e in seg_events(seg1, 0) if e[0] == "saving"]) + 1
            self.wait_for("save", lambda: len([e for e in seg_events(seg1, 0) if e[0] == "saving"]) >= nth)
            time.sleep(self.c.rng.uniform(0, 0.2))
            self.stintd.kill()
            self.stintd.wait()
            time.sleep(self.c.rng.uniform(0, 2.0))
            self.c.log("  %s: kill -9 stintd during save #%d, restarted" % (label, nth))
            self.start_stintd()
            end = self.wait_for("job %d to end" % job,
                                lambda: self.job(job)["state"] in ("DONE", "FAILED"), 240)
            if end and self.job(job)["state"] != "DONE":
                self.c.fail("%s: job %d ended %s: %s" % (label, job, self.job(job)["state"],
                                                          self.job(job).get("message")))
            for seg in [s["id"] for s in self.job(job)["segments"]]:
                self.c.durable[root] |= set(durable(seg))
        else:  # partition
            self.start_agent("n2")
            self.wait_for("node n2", lambda: "node n2 registered" in _text(
                os.path.join(self.dir, "agent-n2.log")))
            self.agents["n1"].send_signal(signal.SIGSTOP)
            stopped = time.monotonic()
            self.c.log("  %s: SIGSTOP agent n1 (segment %s, world %d)" % (label, seg1, world))
            self.wait_for("end of segment %s" % seg1, lambda: [
                sg for sg in self.job(job)["segments"]
                if sg["id"] == seg1 and sg["state"] not in ("running", "notified")], 60)
            fenced_at = time.time()  # stintd ended the old segment by now
            seg2 = self.wait_for("segment after the partition",
                                 lambda: self.job(job)["segments"][-1]["id"] != seg1 and
                                 self.job(job)["segments"][-1]["state"] == "running" and
                                 self.job(job)["segments"][-1]["id"], 120)
            if seg2 is None:
                self.agents["n1"].send_signal(signal.SIGCONT)
                return
            # The old segment's ranks go on saving; wait until one was refused
            # and the new segment committed a few steps.
            self.wait_for("refused save of the old segment",
                          lambda: any(e[0] == "refused" for e in seg_events(seg1, 0)), 120)
            self.wait_for("durable steps of the new segment", lambda: len(durable(seg2)) >= 3, 150)
            self.agents["n1"].send_signal(signal.SIGCONT)
            self.c.log("  %s: SIGCONT agent n1 after %.1f s; segment %s runs" %
                       (label, time.monotonic() - stopped, seg2))
            # The resumed agent learns its segment ended and stops its ranks.
            self.wait_for("old segment's ranks to stop", lambda: all(
                any(e[0] in ("exit", "error") for e in seg_events(seg1, r)) or
                not _alive(seg_events(seg1, r)) for r in range(world)), 60)
            self.check_fenced(root, seg1, seg2, seg_events, world, label, fenced_at)
            self.c.durable[root] |= set(durable(seg1)) | set(durable(seg2))
            # The new segment's run is long: cancel the job, then its ranks end.
            self.call("POST", "/v1/jobs/%d/cancel" % job, {})
            self.wait_for("every rank to end", lambda: not any(
                _alive(read_events(os.path.join(events, f))) for f in os.listdir(events)), 120)
        self.c.check_root(root, state, world, label)

    def check_fenced(self, root, seg1, seg2, seg_events, world, label, fenced_at):
        """No save the old segment started after it was seen ended became
        durable, and no step after the new segment's resume is the old one's."""
        import stint
        started = {e[1]: _wall(e) for e in seg_events(seg1, 0) if e[0] == "saving"}
        stale = [int(e[1]) for e in seg_events(seg1, 0)
                 if e[0] == "durable" and started.get(e[1], 0) > fenced_at]
        if stale:
            self.c.fail("%s: the old segment %s committed steps %s, saved after stintd ended it" %
                        (label, seg1, stale))
        loaded = [int(e[1]) for e in seg_events(seg2, 0) if e[0] == "loaded"]
        resumed = loaded[0] if loaded else 0
        ckpt = stint.Checkpointer(root, collective=False, read_only=True)
        try:
            for step in ckpt.list_committed():
                if step <= resumed:
                    continue
                writer = ckpt.load(step=step)["writer"]
                if str(writer["segment"]) != str(seg2):
                    self.c.fail("%s: step %d (after the resume at %d) was committed by segment %s, "
                                "not the new segment %s" % (label, step, resumed, writer["segment"], seg2))
        finally:
            ckpt.close()
        refused = [e for r in range(world) for e in seg_events(seg1, r) if e[0] == "refused"]
        self.c.log("  %s: old segment refused %d saves, e.g. %s" %
                   (label, len(refused), " ".join(refused[0][3:])[:160] if refused else "-"))


def _text(path):
    try:
        with open(path) as f:
            return f.read()
    except FileNotFoundError:
        return ""


def _alive(events):
    pids = [int(e[2]) for e in events if e[:2] == ["start", "pid"]]
    for pid in pids:
        try:
            os.kill(pid, 0)
            return True
        except ProcessLookupError:
            pass
    return False


def _master_ports():
    """A range of 40 ports below 29500 and the ephemeral range, by pid, so
    that campaigns and tests running at once on one host rarely share one."""
    first = 20000 + (os.getpid() % 200) * 40
    return first, first + 39
