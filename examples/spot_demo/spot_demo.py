#!/usr/bin/env python3
"""spot_demo: one training job lives through a few minutes of GPU fragments.

Everything is real and on this machine: a stintd (its own SQLite file) on a
loopback port, two pools ("onprem" hard fragments and "spot" capacity that
comes and goes), worker processes of the LibTorch example
examples/elastic_training (data-parallel over Gloo, 1..3 workers), and a
competing higher-priority job. The GPUs are lent by real stint-agent
processes, one per simulated node (its own node name and GPU indices on this
machine): an agent started makes its node's window (hard with an end, or spot
with a notice lead), SIGTERM to it closes the window, and the agents start
the jobs' workers (launch specs: one process per GPU), forward notices as
SIGTERM and report their exits (75: requeue). This script plays the admin who
starts and stops the nodes and submits the jobs, and reads the workers' logs
from the agents' work directories to tell the story.

What happens to the job "train": it starts on a 3-GPU hard node, loses a
worker to a crash (the survivors re-form; the agent reports the crash,
stintd counts it for the crash-loop guard, and the agent starts the worker
again in the still-live segment, so the group re-forms with three), gets a
window-close notice (every rank stops at one
step boundary, rank 0 takes the emergency checkpoint, acks, all exit 75),
resumes on spot GPUs, is preempted there by the urgent job, resumes on a
1-GPU fragment while that runs, moves back to the spot pool when the
fragment closes, has its spot window revoked and finishes on a second spot
window.

The same job also runs continuously, alone on a second stintd: "continuous"
(3 GPUs), and short pace runs at 1 and 2 GPUs, because a step's GPU cost
depends on the world size. Fragment-training efficiency = useful steps per
GPU-second of "train" divided by the same for the continuous job at the
same world sizes (GPU-seconds: GPUs x held time of every segment, as stintd
accounts them); the unmatched ratio against the 3-GPU run is printed too.
The final model of "train" is checked against an uninterrupted one-process
reference run (float tolerance; every sample trained on exactly once per
epoch).

elastic_training takes its coordinator from flags (--url, --token, --job), so
the launch command wraps it in /bin/sh to pass the agent's STINT_COORD_URL and
STINT_JOB_ID and the demo's worker token: its workers register themselves
rather than adopting the agent's per-worker registration.

  python3 examples/spot_demo/spot_demo.py --build build [--scale 1.0] [--keep 0]

(needs build/examples/elastic_training, build/tools/stintd/stintd and
build/tools/stint-agent/stint-agent)

Exit status 0 when the model matches and every job finished; 1 otherwise.
"""

import argparse
import glob
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import struct
import tempfile
import time
import urllib.error
import urllib.request
import zlib

ADMIN_TOKEN = "spot-demo-admin-token"
WORKER_TOKEN = "spot-demo-worker-token"
AGENT_TOKEN = "spot-demo-agent-token"
DATASET, GLOBAL_BATCH = 240, 12  # examples/elastic_training
EXIT_REQUEUE = 75
# Per GPU-hour: the on-prem fragments amortised, the cloud spot capacity.
PRICES = {"onprem": 1.2, "spot": 0.45}


def write_png(path, width, height, pixels):
    """pixels: rows of (r, g, b) tuples; an 8-bit RGB PNG."""
    raw = b"".join(b"\0" + bytes(c for px in row for c in px) for row in pixels)

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)) +
                chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))


def plot_loss_png(path, curve, width=800, height=360):
    """The loss curve stintd keeps (GET /v1/jobs/{id}/losses), one colour per
    segment, a dashed grey line at each segment's start step: what the
    dashboard draws, as a file."""
    points, segments = curve["points"], curve["segments"]
    white, axis, grey = (255, 255, 255), (60, 60, 60), (170, 170, 170)
    colours = [(31, 119, 180), (255, 127, 14), (44, 160, 44), (214, 39, 40), (148, 103, 189),
               (140, 86, 75), (227, 119, 194)]
    img = [[white] * width for _ in range(height)]
    left, right, top, bottom = 50, width - 10, 10, height - 30
    for x in range(left, right + 1):
        img[bottom][x] = axis
    for y in range(top, bottom + 1):
        img[y][left] = axis
    if not points:
        write_png(path, width, height, img)
        return
    steps = [p[0] for p in points] + [s["start_step"] for s in segments]
    losses = [p[1] for p in points]
    s0, s1 = min(steps), max(max(steps), min(steps) + 1)
    l0, l1 = min(losses), max(max(losses), min(losses) + 1e-12)

    def xy(step, loss):
        return (left + round((step - s0) / (s1 - s0) * (right - left)),
                bottom - round((loss - l0) / (l1 - l0) * (bottom - top)))

    for s in segments:  # segment boundaries
        x = xy(s["start_step"], l0)[0]
        for y in range(top, bottom, 2):
            img[y][x] = grey
    order = {s["id"]: i for i, s in enumerate(segments)}
    prev = {}
    for step, loss, seg, _ in points:
        c = colours[order.get(seg, 0) % len(colours)]
        x, y = xy(step, loss)
        if seg in prev:  # a line from the segment's previous point
            px, py = prev[seg]
            n = max(abs(x - px), abs(y - py), 1)
            for i in range(n + 1):
                img[py + (y - py) * i // n][px + (x - px) * i // n] = c
        img[y][x] = c
        prev[seg] = (x, y)
    write_png(path, width, height, img)


class Stintd:
    """A stintd process and a small JSON client for it."""

    def __init__(self, binary, work, extra_args, store=None):
        os.makedirs(work, exist_ok=True)
        self.log_path = os.path.join(work, "stintd.log")
        env = dict(os.environ, STINTD_ADMIN_TOKEN=ADMIN_TOKEN, STINTD_WORKER_TOKEN=WORKER_TOKEN,
                   STINTD_AGENT_TOKEN=AGENT_TOKEN)
        self._log = open(self.log_path, "w")
        # A PostgreSQL database (--store) keeps the state beside the
        # workers' logs dir; stintd says it leads before it listens.
        where = ["--store", store, "--logs-dir", os.path.join(work, "stintd.logs")] if store \
            else ["--db", os.path.join(work, "stintd.db")]
        self.proc = subprocess.Popen(
            [binary, "--listen", "127.0.0.1:0"] + where + extra_args,
            stdout=subprocess.PIPE, stderr=self._log, env=env, text=True)
        m, line = None, ""
        for line in self.proc.stdout:
            m = re.search(r"listening on ([\d.]+):(\d+)", line)
            if m or not line.startswith("stintd: "):
                break
        if not m:
            raise RuntimeError("stintd did not start: %r (log: %s)" % (line, self.log_path))
        self.url = "http://%s:%s" % (m.group(1), m.group(2))

    def call(self, method, path, body=None):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method)
        req.add_header("Authorization", "Bearer " + ADMIN_TOKEN)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                text = r.read().decode()
        except urllib.error.HTTPError as e:
            raise RuntimeError("%s %s: %s %s" % (method, path, e.code, e.read().decode())) from None
        return json.loads(text) if text.startswith(("{", "[")) else text

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self._log.close()


class Agent:
    """A stint-agent process: one simulated node lending GPU indices to a pool."""

    def __init__(self, binary, stintd, node, pool, gpus, work, until_ms=None, spot_lead=None):
        self.node, self.stintd = node, stintd
        self.workdir = os.path.join(work, "agents", node)
        os.makedirs(self.workdir, exist_ok=True)
        args = [binary, "--coord", stintd.url, "--pool", pool, "--gpus", ",".join(map(str, gpus)),
                "--node", node, "--addr", "127.0.0.1", "--heartbeat-seconds", "0.2",
                "--workdir", self.workdir]
        if until_ms is not None:
            args += ["--until", str(until_ms // 1000)]  # unix seconds
        if spot_lead is not None:
            args += ["--spot", "--notice-lead", str(spot_lead)]
        self.log_path = os.path.join(work, "agents", node + ".log")
        self._log = open(self.log_path, "w")
        self.proc = subprocess.Popen(args, stdout=self._log, stderr=subprocess.STDOUT,
                                     env=dict(os.environ, STINT_AGENT_TOKEN=AGENT_TOKEN))

    def workers(self, job_id):
        """pids of the agent's live workers of stintd job `job_id`."""
        pids = []
        for tid in os.listdir("/proc/%d/task" % self.proc.pid):
            with open("/proc/%d/task/%s/children" % (self.proc.pid, tid)) as f:
                pids += [int(p) for p in f.read().split()]
        mine = []
        for pid in pids:
            try:
                with open("/proc/%d/environ" % pid, "rb") as f:
                    env = f.read().split(b"\0")
            except OSError:
                continue  # exited meanwhile
            if b"STINT_JOB_ID=%d" % job_id in env:
                mine.append(pid)
        return mine

    def stop(self, wait=30):
        """SIGTERM: the node's window closes with its notice lead, the agent
        drains its workers and exits."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._log.close()


class RankLog:
    """One rank's log of one segment, as an agent writes it
    (<workdir>/job-<id>/segment-<id>/rank-<r>.log)."""

    def __init__(self, path, job_name, segment_id):
        self.log_path, self.job_name, self.segment_id = path, job_name, segment_id
        self._offset = 0

    def new_lines(self):
        """Lines the worker printed since the last call."""
        with open(self.log_path, "rb") as f:
            f.seek(self._offset)
            data = f.read()
        end = data.rfind(b"\n") + 1
        self._offset += end
        return data[:end].decode(errors="replace").splitlines()


class Demo:
    def __init__(self, opts):
        self.opts = opts
        self.build = opts.build
        self.work = tempfile.mkdtemp(prefix="stint-spot-demo-", dir=opts.work_root)
        self.logs = os.path.join(self.work, "logs")
        os.makedirs(self.logs)
        self.t0 = time.monotonic()
        self.wall0_ms = int(time.time() * 1000)
        self.stintd = None     # the cluster's coordinator
        self.reference = None  # a second one, for the continuous runs alone
        self.jobs = {}          # name -> {"id", "name", "args"}
        self.agents = {}        # node name -> Agent, every one ever started
        self.rank_logs = {}     # path -> RankLog of every worker the agents started
        self.seen_segments = {}  # (job, segment id) -> last state printed
        self.events = {"reforms": [], "checkpoints": 0, "preempted": 0, "resumed": [], "crashes": 0,
                       "last_step": {}}
        self.open_run = {}  # (job, segment) -> (world, first step) of its current generation
        self.steps_at_world = {}  # job -> {world: steps trained at that world size}
        # job -> (first step, t_ms) of its first step, then (world, GPU-seconds per step) at its end
        self.steady = {}
        # "train"'s segments as its workers saw them: segment id -> {"first": (step, t_ms) of
        # its first step, "last": (step, t_ms) of its last, "resumed": step, "kept": newest
        # step made durable in it}
        self.segment_steps = {}
        self.failures = []

    # --- output -------------------------------------------------------
    def say(self, text):
        print("[%6.1fs] %s" % (time.monotonic() - self.t0, text), flush=True)

    def at_ms(self, seconds):
        return self.wall0_ms + int(seconds * 1000 * self.opts.scale)

    # --- the nodes: stint-agent processes --------------------------------
    def node(self, name, pool, gpus, end=None, spot_lead=None, stintd=None):
        """Starts the agent of node `name`: a hard window until `end` (scenario
        seconds), or a spot one with a notice lead."""
        stintd = stintd or self.stintd
        agent = Agent(os.path.join(self.build, "tools", "stint-agent", "stint-agent"), stintd, name,
                      pool, gpus, self.work, until_ms=None if end is None else self.at_ms(end),
                      spot_lead=spot_lead)
        self.agents[name] = agent
        kind = "hard, until %.0fs" % (end * self.opts.scale) if end is not None else \
            "spot, notice lead %ss" % spot_lead
        self.say("admin: node %s (stint-agent pid %d) lends GPUs %s to pool %s (%s)" % (
            name, agent.proc.pid, ",".join(map(str, gpus)), pool, kind))

    def submit(self, name, pool, steps, min_gpus, max_gpus, priority="MEDIUM", stintd=None):
        stintd = stintd or self.stintd
        ckpt = os.path.join(self.work, "ckpt-" + name)
        args = ["--steps", str(steps), "--sample-ms", str(self.opts.sample_ms), "--ckpt-dir", ckpt,
                "--save-every", str(self.opts.save_every), "--out", os.path.join(self.work, name + ".json"),
                "--timeout-ms", "5000"]
        # The agents start one process per GPU; elastic_training takes its
        # coordinator from flags, so a shell passes the agent's environment on.
        wrap = ('exec "$0" --url "$STINT_COORD_URL" --token "$DEMO_TOKEN" --job "$STINT_JOB_ID" '
                '--name "$STINT_WORKER_NAME" "$@"')
        binary = os.path.join(self.build, "examples", "elastic_training")
        launch = {"command": ["/bin/sh", "-c", wrap, binary] + args,
                  "env": {"DEMO_TOKEN": WORKER_TOKEN, "OMP_NUM_THREADS": "1"}}
        job = stintd.call("POST", "/v1/jobs", {
            "name": name, "pool": pool, "priority": priority, "min_gpus": min_gpus, "max_gpus": max_gpus,
            "checkpoint_seconds": 1, "restart_seconds": 2, "checkpoint_interval_seconds": 20,
            "launch": launch})
        self.jobs[name] = {"id": job["id"], "name": name, "args": args, "steps": steps, "stintd": stintd}
        self.say("admin: job %d '%s' (%s, %d..%d GPUs, pool %s, %d steps)" %
                 (job["id"], name, priority, min_gpus, max_gpus, pool, steps))

    # --- what the agents and stintd did ---------------------------------
    def observe(self):
        """Narrates segment changes and the workers' new log lines."""
        for stintd in (self.stintd, self.reference):
            by_job = {j["id"]: j for j in self.jobs.values() if j["stintd"] is stintd}
            for s in stintd.call("GET", "/v1/segments")["segments"]:
                job = by_job.get(s["job_id"])
                key = None if job is None else (job["name"], s["id"])  # segment ids are per coordinator
                if key is not None and self.seen_segments.get(key) != s["state"]:
                    self.seen_segments[key] = s["state"]
                    if stintd is self.stintd:
                        self.narrate_segment(job, s)
            for agent in self.agents.values():
                if agent.stintd is not stintd:
                    continue
                for path in glob.glob(os.path.join(agent.workdir, "job-*", "segment-*", "rank-*.log")):
                    if path not in self.rank_logs:
                        parts = path.split(os.sep)
                        job = by_job.get(int(parts[-3][len("job-"):]))
                        if job is not None:
                            self.rank_logs[path] = RankLog(path, job["name"], int(parts[-2][len("segment-"):]))
        for log in self.rank_logs.values():
            for line in log.new_lines():
                self.narrate_worker(log, line)

    def narrate_segment(self, job, s):
        where = ", ".join("window %d x%d" % (a["window_id"], a["gpus"]) for a in s["allocs"])
        if s["state"] == "running":
            nodes = ", ".join("%s GPUs %s" % (self.node_of(p["window_id"]), ",".join(map(str, p["gpus"])))
                              for p in s.get("placement", []))
            self.say("stintd: segment %d of '%s' starts on %s (%d GPUs: %s); its agents start the workers" %
                     (s["id"], job["name"], where, s["gpus"], nodes))
        elif s["state"] == "notified":
            self.say("stintd: notice to '%s' (segment %d): %s, deadline in %.1fs" %
                     (job["name"], s["id"], s["notice_reason"],
                      max(0, s["deadline_ms"] - time.time() * 1000) / 1000))
        else:
            self.say("stintd: segment %d of '%s' %s" % (s["id"], job["name"], s["state"]))

    def note_segment_step(self, w, line):
        """What "train"'s workers say of their segment: its first and last
        steps with their times, where it resumed, what it made durable."""
        if w.job_name != "train":
            return
        seg = self.segment_steps.setdefault(w.segment_id, {"resumed": 0, "kept": 0})
        f = line.split()
        if line.startswith("FIRST_STEP"):  # FIRST_STEP g step s t_ms T
            got = (int(f[3]), int(f[5]))
            if "first" not in seg or got[1] < seg["first"][1]:
                seg["first"] = got
        elif line.startswith(("PREEMPTED step", "FENCED step", "DONE step")) and "t_ms" in f:
            got = (int(f[2]), int(f[f.index("t_ms") + 1]))
            if "last" not in seg or got[0] > seg["last"][0]:
                seg["last"] = got
            if not line.startswith("FENCED"):  # acked, or the job is complete
                seg["kept"] = max(seg["kept"], got[0])
        elif line.startswith("CHECKPOINT step"):
            seg["kept"] = max(seg["kept"], int(f[2]))
        elif line.startswith("RESUMED step"):
            seg["resumed"] = int(f[2])

    def narrate_worker(self, w, line):
        self.note_segment_step(w, line)
        name = w.job_name
        m = re.match(r"GENERATION (\d+) rank (\d+) world (\d+) reform_s ([\d.]+) step (\d+)", line)
        if m and m.group(2) == "0":
            gen, world, reform_s, step = int(m.group(1)), int(m.group(3)), float(m.group(4)), int(m.group(5))
            self.close_run(name, w.segment_id, step)
            self.open_run[(name, w.segment_id)] = (world, step)
            if reform_s > 0:
                self.events["reforms"].append((name, reform_s))
            self.say("%s: group generation %d formed, world %d, at step %d%s" %
                     (name, gen, world, step, " (re-formed in %.2fs)" % reform_s if reform_s > 0 else ""))
        elif line.startswith("RESUMED step"):
            self.events["resumed"].append((name, int(line.split()[-1])))
            self.say("%s: rank 0 resumed from the checkpoint of step %s" % (name, line.split()[-1]))
        elif line.startswith("CHECKPOINT step"):
            if name == "train":
                self.events["checkpoints"] += 1
        elif line.startswith("FIRST_STEP") and name not in self.steady:
            _, _, _, step, _, t_ms = line.split()
            self.steady[name] = (int(step), int(t_ms))
        elif line.startswith(("PREEMPTED step", "FENCED step")):
            step = int(line.split()[2])
            self.close_run(name, w.segment_id, step)
            if self.events["last_step"].get((name, w.segment_id)) != step:
                self.events["last_step"][(name, w.segment_id)] = step
                if name == "train":
                    self.events["preempted"] += 1
                self.say("%s: every rank stopped at step %d; rank 0 checkpointed, acked; exit 75" % (name, step))
        elif line.startswith("DONE step"):
            fields = line.split()
            step = int(fields[2])
            self.events["last_step"][(name, w.segment_id)] = step
            world = self.close_run(name, w.segment_id, step)
            if world and len(self.steady.get(name, ())) == 2:
                first, t_first = self.steady[name]
                # GPU-seconds per step once running: the job's pace at that world size.
                self.steady[name] = (world, world * (int(fields[6]) - t_first) / 1000.0 / max(1, step - first))
        elif line.startswith("COLLECTIVE_FAILED"):
            self.say("%s: a collective failed (%s): the step is skipped, the group re-forms" %
                     (name, line.split(":", 1)[1].strip()[:70]))

    def node_of(self, window_id):
        for w in self.stintd.call("GET", "/v1/windows")["windows"]:
            if w["id"] == window_id:
                return w.get("node") or "window %d" % window_id
        return "window %d" % window_id

    def close_run(self, name, segment_id, step):
        """Ends the open generation of (name, segment) at `step`."""
        run = self.open_run.pop((name, segment_id), None)
        if run is None:
            return None
        if step > run[1]:
            per_world = self.steps_at_world.setdefault(name, {})
            per_world[run[0]] = per_world.get(run[0], 0) + step - run[1]
        return run[0]

    # --- the scenario -------------------------------------------------
    def crash_one(self, name):
        job = self.jobs[name]
        for agent in self.agents.values():
            if agent.stintd is not job["stintd"] or agent.proc.poll() is not None:
                continue
            pids = agent.workers(job["id"])
            if pids:
                victim = max(pids)
                os.kill(victim, signal.SIGKILL)
                self.events["crashes"] += 1
                self.say("chaos: SIGKILL a worker of '%s' on node %s (pid %d); its agent starts it again and the group re-forms"
                         % (name, agent.node, victim))
                return

    def run(self):
        o = self.opts
        extra = ["--tick-seconds", "0.1", "--lease-ttl-seconds", "3", "--rendezvous-last-call-seconds", "1.5",
                 "--safety-seconds", "2", "--min-run-seconds", "5", "--start-grace-seconds", "60"]
        binary = os.path.join(self.build, "tools", "stintd", "stintd")
        self.stintd = Stintd(binary, self.work, extra, store=o.store)
        self.say("stintd listening on %s (%s)" % (
            self.stintd.url, "PostgreSQL" if o.store else "SQLite %s/stintd.db" % self.work))
        self.say("dashboard: %s/dashboard#token=%s" % (self.stintd.url, WORKER_TOKEN))
        for pool, desc in (("onprem", "hard fragments between other teams' reservations"),
                           ("spot", "cloud spot capacity")):
            self.stintd.call("POST", "/v1/pools", {"name": pool, "description": desc,
                                                   "price_per_gpu_hour": PRICES[pool],
                                                   "pricing": "spot" if pool == "spot" else "on_prem"})
        # The same job run continuously, and at 1 and 2 GPUs for each size's
        # pace, on a coordinator of their own: no window of theirs is ever
        # free for "train".
        self.reference = Stintd(binary, os.path.join(self.work, "reference"), extra)
        self.reference.call("POST", "/v1/pools", {"name": "continuous", "description": "one long window"})
        self.say("reference stintd (the continuous runs alone) on %s" % self.reference.url)
        steps = o.steps
        # Simulated nodes, each a stint-agent with GPU indices of its own.
        self.node("ref-node", "continuous", [0, 1, 2, 3, 4, 5], end=3600, stintd=self.reference)
        self.node("onprem-a", "onprem", [0, 1, 2], end=50)
        self.submit("continuous", "continuous", steps, 1, 3, stintd=self.reference)
        for world in (1, 2):
            self.submit("pace-%d" % world, "continuous", o.pace_steps, world, world, stintd=self.reference)
        self.submit("train", "", steps, 1, 3)
        s = o.scale
        scenario = [
            (20, lambda: self.crash_one("train")),
            (30, lambda: self.node("spot-a", "spot", [0, 1], spot_lead=4)),
            (62, lambda: self.submit("urgent", "spot", o.urgent_steps, 2, 2, priority="HIGH")),
            (75, lambda: self.node("onprem-b", "onprem", [3], end=115)),
            (100, lambda: self.node("spot-b", "spot", [2, 3], spot_lead=4)),
            (140, lambda: self.revoke("spot-a")),
        ]
        scenario.sort(key=lambda e: e[0])
        deadline = self.t0 + o.time_limit
        while time.monotonic() < deadline:
            elapsed = (time.monotonic() - self.t0) / s
            while scenario and scenario[0][0] <= elapsed:
                scenario.pop(0)[1]()
            self.observe()
            broken = [a for a in self.agents.values() if a.proc.poll() not in (None, 0)]
            if broken:
                self.failures += ["stint-agent of node %s exited %s (log: %s)" % (
                    a.node, a.proc.returncode, a.log_path) for a in broken]
                break
            states = {n: j["stintd"].call("GET", "/v1/jobs/%d" % j["id"])["state"] for n, j in self.jobs.items()}
            if "urgent" in self.jobs and all(v in ("DONE", "FAILED", "CANCELLED") for v in states.values()):
                break
            time.sleep(0.1)
        else:
            self.failures.append("the jobs did not finish within %ds" % o.time_limit)
        # The nodes go: their agents drain (every job is done) and exit 0.
        for agent in self.agents.values():
            agent.stop()
            if agent.proc.returncode != 0:
                self.failures.append("stint-agent of node %s exited %s (log: %s)" % (
                    agent.node, agent.proc.returncode, agent.log_path))
        self.observe()
        self.summary()
        if o.keep > 0:
            self.say("stintd stays up %ds for the dashboard: %s/dashboard#token=%s" %
                     (o.keep, self.stintd.url, WORKER_TOKEN))
            time.sleep(o.keep)

    def revoke(self, node):
        self.agents[node].proc.send_signal(signal.SIGTERM)
        self.say("admin: spot node %s is revoked: SIGTERM to its agent, which closes its window "
                 "(notice lead 4s) and drains its workers" % node)

    # --- the end ----------------------------------------------------------
    def gpu_seconds(self, name):
        job = self.jobs[name]
        segs = job["stintd"].call("GET", "/v1/segments?job_id=%d" % job["id"])["segments"]
        total = 0.0
        for s in segs:
            end = s["ended_ms"] if s.get("ended_ms") else int(time.time() * 1000)
            total += s["gpus"] * (end - s["start_ms"]) / 1000.0
        return total, segs

    def matched_efficiency(self, train_gs, ref_gs):
        """Steps per GPU-second of "train" / the same job run continuously at the same world sizes.

        A step's GPU cost depends on the world size (data-parallel
        communication), so "train" (1, 2 and 3 GPUs) is compared with
        continuous runs at those sizes: the pace runs (1, 2 GPUs) and
        "continuous" (3) give each size's GPU-seconds per step once running;
        "continuous" gives the share of a continuous run's GPU time that is
        not steps (start-up, the end).
        """
        pace = {}
        for name in ("pace-1", "pace-2", "continuous"):
            got = self.steady.get(name, ())
            if len(got) != 2:
                self.failures.append("no steady pace measured for '%s'" % name)
                return None
            pace[got[0]] = got[1]
        per_world = self.steps_at_world.get("train", {})
        missing = [w for w in per_world if w not in pace]
        if missing or train_gs <= 0 or ref_gs <= 0:
            self.failures.append("no continuous pace for world sizes %s of 'train'" % missing)
            return None
        print("  train's steps by world size: %s; continuous pace, GPU-ms per step: %s" % (
            ", ".join("%d GPU%s: %d" % (w, "s" if w > 1 else "", n) for w, n in sorted(per_world.items())),
            ", ".join("%d: %.1f" % (w, 1000 * c) for w, c in sorted(pace.items()))))
        continuous_share = self.jobs["continuous"]["steps"] * pace[3] / ref_gs
        useful = self.jobs["train"]["steps"] / max(1, sum(per_world.values()))  # steps trained twice are waste
        matched = useful * sum(n * pace[w] for w, n in per_world.items()) / continuous_share
        return matched / train_gs

    def fragment_efficiency(self, segs):
        """stintd's fragment-training efficiency (tools/stintd/API.md,
        "Efficiency and loss"), computed again from the workers' own logs:
        each segment's kept steps (resumed checkpoint to its newest durable
        one) at the job's pace for the segment's GPUs (its steps' time over
        their count, pooled over the segments of that size, once each
        segment's first step is done), over the GPU-seconds held."""
        time_at = {}  # gpus -> [seconds, steps]
        for s in segs:
            got = self.segment_steps.get(s["id"], {})
            if "first" in got and "last" in got and got["last"][0] > got["first"][0]:
                acc = time_at.setdefault(s["gpus"], [0.0, 0])
                acc[0] += (got["last"][1] - got["first"][1]) / 1000.0
                acc[1] += got["last"][0] - got["first"][0]
        useful = held = 0.0
        for s in segs:
            got = self.segment_steps.get(s["id"], {"resumed": 0, "kept": 0})
            seconds, count = time_at.get(s["gpus"], (0.0, 0))
            pace = seconds / count if count else 0.0
            useful += s["gpus"] * pace * max(0, got["kept"] - got["resumed"])
            held += s["gpus"] * ((s["ended_ms"] or int(time.time() * 1000)) - s["start_ms"]) / 1000.0
        return useful / held if held > 0 else 0.0

    def check_model(self, name):
        ref_path = os.path.join(self.work, "reference-model.json")
        subprocess.run([os.path.join(self.build, "examples", "elastic_training"), "--reference", "--steps",
                        str(self.jobs[name]["steps"]), "--out", ref_path], check=True, stdout=subprocess.DEVNULL)
        try:
            with open(os.path.join(self.work, name + ".json")) as f:
                got = json.load(f)
        except (OSError, ValueError) as e:
            return "no final model from '%s': %s" % (name, e)
        with open(ref_path) as f:
            want = json.load(f)
        epochs = self.jobs[name]["steps"] * GLOBAL_BATCH // DATASET
        worst = max(abs(a - b) for a, b in zip(got["params"], want["params"]))
        if got["step"] != self.jobs[name]["steps"] or worst > 1e-4:
            return "'%s' final model differs from the reference: step %s, max |diff| %.3g" % (
                name, got["step"], worst)
        wrong = [i for i, c in enumerate(got["seen"]) if c != epochs]
        if wrong:
            return "'%s': samples %s were not trained on exactly %d times" % (name, wrong[:5], epochs)
        return "ok: max |param - reference| = %.2g, every sample trained on exactly %d times" % (worst, epochs)

    def summary(self):
        jobs = {n: j["stintd"].call("GET", "/v1/jobs/%d" % j["id"]) for n, j in self.jobs.items()}
        for n, j in jobs.items():
            if j["state"] != "DONE":
                self.failures.append("job '%s' ended %s: %s" % (n, j["state"], j.get("message", "")))
        train_gs, train_segs = self.gpu_seconds("train")
        ref_gs, _ = self.gpu_seconds("continuous")
        steps = self.jobs["train"]["steps"]
        # Steps trained twice: a segment's last step beyond where the next one resumed.
        lost = 0
        resumed = [s for n, s in self.events["resumed"] if n == "train"]
        ends = [s for (n, seg), s in sorted(self.events["last_step"].items(), key=lambda kv: kv[0][1])
                if n == "train"]
        for end, start in zip(ends, resumed):
            lost += max(0, end - start)
        reforms = [r for n, r in self.events["reforms"] if n == "train"]
        print()
        print("== spot_demo summary")
        print("  train: %d steps in %d segments (%s)" % (
            steps, len(train_segs), ", ".join("%d GPU%s" % (s["gpus"], "s" if s["gpus"] > 1 else "")
                                              for s in train_segs)))
        notices = [s["notice_reason"] for s in train_segs if s.get("notice_reason", "none") != "none"]
        if self.events["preempted"] < len(notices):
            self.failures.append("'train' got %d notices but stopped cleanly after %d" % (
                len(notices), self.events["preempted"]))
        print("  checkpoints (rank 0, durable, fenced): %d; notices obeyed: %d of %d (%s); worker crashes: %d" % (
            self.events["checkpoints"], self.events["preempted"], len(notices),
            ", ".join("%s %d" % (r, notices.count(r)) for r in sorted(set(notices))), self.events["crashes"]))
        print("  lost steps (trained again after a resume): %d; stintd's lost GPU-seconds: %.1f" % (
            lost, jobs["train"]["lost_gpu_seconds"]))
        if reforms:
            print("  elastic re-forms: %d, %.2fs median (membership change to the new group)" % (
                len(reforms), sorted(reforms)[len(reforms) // 2]))
        print("  GPU-seconds held: train %.1f, continuous %.1f (same %d steps)" % (train_gs, ref_gs, steps))
        raw = ref_gs / train_gs if train_gs > 0 else 0.0
        print("  steps per GPU-second, train / continuous at 3 GPUs: %.3f" % raw)
        eff = self.matched_efficiency(train_gs, ref_gs)
        if eff is not None:
            print("  fragment-training efficiency = %.3f (target >= 0.95)" % eff)
        # stintd's own figures: cost, and the efficiency against the job's
        # own pace per world size, which this script computes again from the
        # workers' logs.
        figures = jobs["train"].get("figures", {})
        own = self.fragment_efficiency(train_segs)
        theirs = figures.get("efficiency", 0.0)
        print("  stintd: cost %.4f (%s), %d kept steps, cost per useful step %.6f" % (
            jobs["train"]["cost"], ", ".join("%s %.2f/GPU-h" % kv for kv in sorted(PRICES.items())),
            figures.get("kept_steps", 0), figures.get("cost_per_step", 0.0)))
        diff = abs(theirs - own) / own if own > 0 else float("inf")
        print("  stintd's fragment-training efficiency %.4f, from the workers' logs %.4f (%.2f %% apart, "
              "target <= 1 %%)" % (theirs, own, 100 * diff))
        if diff > 0.01:
            self.failures.append("stintd's efficiency %.4f and the logs' %.4f differ by %.2f %%" % (
                theirs, own, 100 * diff))
        curve = self.stintd.call("GET", "/v1/jobs/%d/losses" % self.jobs["train"]["id"])
        png = os.path.join(self.work, "train-loss.png")
        plot_loss_png(png, curve)
        print("  loss curve: %d points over %d segments -> %s (the dashboard draws it too)" % (
            len(curve["points"]), len(curve["segments"]), png))
        if not curve["points"]:
            self.failures.append("stintd holds no loss point of 'train'")
        verdict = self.check_model("train")
        print("  final model vs one uninterrupted process: %s" % verdict)
        if not verdict.startswith("ok"):
            self.failures.append(verdict)
        print("  wall time: %.0fs; logs and checkpoints in %s" % (time.monotonic() - self.t0, self.work))

    def close(self):
        for agent in self.agents.values():
            agent.stop()
        for stintd in (self.stintd, self.reference):
            if stintd is not None:
                stintd.stop()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default="build", help="the CMake build directory")
    p.add_argument("--steps", type=int, default=4000, help="steps of the training job")
    p.add_argument("--pace-steps", type=int, default=500, help="steps of the 1- and 2-GPU pace runs")
    p.add_argument("--urgent-steps", type=int, default=700, help="steps of the urgent job")
    p.add_argument("--sample-ms", type=int, default=5, help="simulated GPU time per sample")
    p.add_argument("--save-every", type=int, default=200, help="periodic checkpoint interval, steps")
    p.add_argument("--scale", type=float, default=1.0, help="stretches the scenario's clock")
    p.add_argument("--time-limit", type=int, default=280, help="seconds before the demo gives up")
    p.add_argument("--keep", type=int, default=0, help="seconds stintd stays up after the end (dashboard)")
    p.add_argument("--work-root", default=None, help="where the temporary work directory goes")
    p.add_argument("--keep-work", action="store_true", help="keep logs and checkpoints")
    p.add_argument("--store", default=None,
                   help="the cluster stintd's state in this PostgreSQL database "
                        "(postgresql://...; an empty one) instead of an SQLite file")
    opts = p.parse_args()
    demo = Demo(opts)
    ok = False
    try:
        demo.run()
        ok = not demo.failures
    finally:
        demo.close()
    for f in demo.failures:
        print("  FAILED: " + f)
    if ok and not opts.keep_work:
        shutil.rmtree(demo.work, ignore_errors=True)
    print("spot_demo: %s" % ("OK" if ok else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
