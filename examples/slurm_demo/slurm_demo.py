#!/usr/bin/env python3
"""slurm_demo: one long training job lives in the holes of a real Slurm.

Everything is real and on this machine (root needed): a Slurm 22.05 cluster
of three nodes with four (fake) GPUs each (tools/slurm/cluster.sh: a private
munged, slurmctld, three `slurmd -N`), and a stintd over it (`stintd
--slurm`: stintd keeps the queue, Slurm runs every segment as a Slurm job
bound to its node; no stint process on the nodes). The training job is the
LibTorch example examples/resumable_training, data-parallel over Gloo, one
srun task per GPU (4 ranks), checkpointing every 200 steps.

What happens to "train" (LOW priority, 4 GPUs), while other users' Slurm
jobs hold nodes:
  1. backfill hole: two of the three nodes are busy with other users' jobs;
     train starts in the free one;
  2. reservation: an admin reserves train's node for maintenance starting
     in 25 s (MAINT, IGNORE_JOBS): stintd's window there ends where the
     reservation starts, train gets its notice in time, checkpoints, and
     moves to the node the first user left;
  3. preemption: an urgent HIGH job needs a whole node and none is free:
     stintd preempts train (SIGTERM through scancel --signal), train
     checkpoints and waits; it resumes once the urgent job is done;
  4. drain: an admin drains train's node: its window closes with the notice
     lead, train checkpoints and moves to a node that came free.

Then the same job runs again, "continuous", alone on the quiet cluster
through the same stintd and Slurm, never interrupted. Fragment-training
efficiency = steps per GPU-second of train over the same for continuous
(GPU-seconds: 4 x each segment's held time, as stintd accounts both, from
the grant to the end of the Slurm job), at the same world size. The final
parameters and optimizer state must be bit-identical to continuous's.

  python3 examples/slurm_demo/slurm_demo.py --build build [--steps 1500] [--step-ms 80]

Exit status 0 when every job finished and the model matches; 1 otherwise;
0 with "skipped" where Slurm cannot run here (not root, not installed).
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
CLUSTER_SH = os.path.join(REPO, "tools", "slurm", "cluster.sh")
ADMIN_TOKEN = "slurm-demo-admin-token"
WORKER_TOKEN = "slurm-demo-worker-token"
GPUS = 4


class Demo:
    def __init__(self, opts):
        self.opts = opts
        self.build = os.path.abspath(opts.build)
        self.train_bin = os.path.join(self.build, "examples", "resumable_training")
        self.work = tempfile.mkdtemp(prefix="stint-slurm-demo-", dir=opts.work_root)
        self.t0 = time.monotonic()
        self.failures = []
        self.cluster_dir = os.path.join(self.work, "cluster")
        self.env = None
        self.stintd = None
        self.foreign = []
        self.nodes = []
        self.narrated = set()
        self.events = []  # the admin's moves, in order
        self.train = None
        self.continuous = None

    def say(self, text):
        print("[%6.1fs] %s" % (time.monotonic() - self.t0, text), flush=True)

    def run_cmd(self, *args, check=True):
        r = subprocess.run(list(args), env=self.env, capture_output=True, text=True, timeout=120)
        if check and r.returncode != 0:
            raise RuntimeError("%s: exit %d: %s%s" % (" ".join(args), r.returncode, r.stdout, r.stderr))
        return r.stdout

    def ctl(self, *args):
        return json.loads(self.run_cmd(os.path.join(self.build, "tools", "stintctl", "stintctl"),
                                       "--json", *args))

    # --- set-up ---------------------------------------------------------------
    def start(self):
        prefix = "sd%dn" % (os.getpid() % 10000)
        subprocess.run(["bash", CLUSTER_SH, "start", self.cluster_dir, "--nodes", "3", "--gpus",
                        str(GPUS), "--prefix", prefix], check=True, timeout=120)
        self.nodes = ["%s%d" % (prefix, i) for i in (1, 2, 3)]
        self.env = dict(os.environ, SLURM_CONF=os.path.join(self.cluster_dir, "slurm.conf"),
                        STINTD_ADMIN_TOKEN=ADMIN_TOKEN, STINTD_WORKER_TOKEN=WORKER_TOKEN)
        self.stintd_log = open(os.path.join(self.work, "stintd.log"), "w")
        self.stintd = subprocess.Popen(
            [os.path.join(self.build, "tools", "stintd", "stintd"), "--db",
             os.path.join(self.work, "stintd.db"), "--listen", "127.0.0.1:0", "--slurm",
             "--slurm-partition", "low", "--slurm-poll-seconds", "0.5",
             "--slurm-notice-lead-seconds", "20", "--slurm-margin-seconds", "20",
             "--min-run-seconds", "0", "--tick-seconds", "0.25"],
            env=self.env, stdout=subprocess.PIPE, stderr=self.stintd_log, text=True)
        line = self.stintd.stdout.readline()
        if not line.startswith("stintd: listening on "):
            raise RuntimeError("stintd did not start: " + open(self.stintd_log.name).read())
        self.env["STINTD_URL"] = "http://" + line.split()[-1]
        self.env["STINTD_TOKEN"] = ADMIN_TOKEN
        self.say("a Slurm cluster of 3 nodes x %d GPUs (%s) and stintd --slurm over its 'low' "
                 "partition" % (GPUS, ", ".join(self.nodes)))

    def train_args(self, ckpt, steps):
        return ["--ckpt-dir", ckpt, "--steps", str(steps), "--every", "200", "--seed", "3",
                "--step-ms", str(self.opts.step_ms)]

    def foreign_job(self, node, seconds, name):
        """Another user's Slurm job holding a whole node."""
        job = self.run_cmd("sbatch", "--parsable", "--partition=low", "-w", node,
                           "--gres=gpu:%d" % GPUS, "--job-name=" + name, "-o", "/dev/null",
                           "--wrap", "sleep %d" % seconds).strip()
        self.foreign.append(job)
        return job

    def submit(self, name, priority, steps):
        ckpt = os.path.join(self.work, "ckpt-" + name)
        job = self.ctl("jobs", "submit", "--name", name, "--gpus", str(GPUS), "--pool", "low",
                       "--priority", priority, "--checkpoint-seconds", "2", "--restart-seconds", "5",
                       "--signal", "TERM", "--", self.train_bin, *self.train_args(ckpt, steps))
        return job["id"]

    # --- watching -------------------------------------------------------------
    def segments(self, job):
        return self.ctl("jobs", "show", str(job))["segments"]

    def node_of(self, segment):
        """The node a segment runs (or ran) on: stintd's placement, else its Slurm job's."""
        for n in self.ctl("nodes")["nodes"]:
            if any(r["segment_id"] == segment["id"] for r in n["running"]):
                return n["name"]
        ext = segment.get("external_id", "")
        if not ext:
            return "?"
        return self.run_cmd("squeue", "-h", "-t", "all", "-j", ext.split(":")[1], "-o", "%N").strip() or "?"

    def watch(self, name, job):
        """Narrates new segments and their notices; the running segment or None."""
        current = None
        for s in self.segments(job):
            key = (name, s["id"], s["state"])
            if key not in self.narrated and s.get("external_id"):
                self.narrated.add(key)
                if s["state"] in ("running", "notified") and (name, s["id"], "start") not in self.narrated:
                    self.narrated.add((name, s["id"], "start"))
                    self.say("%s: segment %d runs as Slurm job %s on %s" % (
                        name, s["id"], s["external_id"].split(":")[1], self.node_of(s)))
                if s["state"] == "notified":
                    self.say("%s: segment %d notified (%s): checkpoint and stop" % (
                        name, s["id"], s["notice_reason"]))
            if s["state"] in ("running", "notified"):
                current = s
        return current

    def wait_until(self, what, cond, seconds):
        deadline = time.monotonic() + seconds
        while True:
            got = cond()
            if got:
                return got
            if time.monotonic() > deadline:
                raise RuntimeError("%s did not happen within %d s" % (what, seconds))
            if self.train is not None:
                self.watch("train", self.train)
            time.sleep(0.5)

    def age(self, segment):
        return time.time() - segment["start_ms"] / 1000.0

    # --- the scenario ---------------------------------------------------------
    def run(self):
        self.start()
        a, b, c = self.nodes
        self.foreign_job(a, 20, "user1-eval")
        self.foreign_job(b, 100000, "user2-sweep")
        self.say("other users' jobs hold %s (for 20 s) and %s: one node is a hole" % (a, b))
        self.wait_until("one open stintd window", lambda: self.open_nodes() == {c}, 60)
        self.train = self.submit("train", "LOW", self.opts.steps)
        self.say("train submitted to stintd (LOW, %d GPUs, %d steps of %d ms)" % (
            GPUS, self.opts.steps, self.opts.step_ms))
        limit = self.opts.time_limit

        seg = self.wait_until("train's first segment", lambda: self.running_for(20), limit)
        node = self.node_of(seg)
        self.run_cmd("scontrol", "create", "reservation", "ReservationName=maint", "StartTime=now+25",
                     "Duration=2", "Nodes=" + node, "Flags=MAINT,IGNORE_JOBS", "Users=root")
        self.say("admin: maintenance reservation on %s from now+25s for 2 minutes" % node)
        self.events.append("reservation")

        seg = self.wait_until("train in a new segment", lambda: self.running_for(20, after=seg["id"]), limit)
        self.urgent = self.submit("urgent", "HIGH", 300)
        self.say("an urgent HIGH job of %d GPUs arrives; no node is free" % GPUS)
        self.events.append("preemption")
        self.wait_until("urgent to finish", lambda: self.ctl("jobs", "show", str(self.urgent))["state"] == "DONE", limit)
        self.say("urgent is done")

        seg = self.wait_until("train back", lambda: self.running_for(15, after=seg["id"]), limit)
        node = self.node_of(seg)
        self.run_cmd("scancel", self.foreign[1])  # user2's sweep ends: a node for train to move to
        self.run_cmd("scontrol", "update", "NodeName=" + node, "State=DRAIN", "Reason=disk-errors")
        self.say("user2's sweep on %s ends; admin: %s is drained (disk errors)" % (b, node))
        self.events.append("drain")
        self.wait_until("train to finish", lambda: self.ctl("jobs", "show", str(self.train))["state"]
                        in ("DONE", "FAILED", "CANCELLED"), limit)
        self.say("train finished")
        self.run_cmd("scontrol", "update", "NodeName=" + node, "State=RESUME")
        self.continuous = self.submit("continuous", "MEDIUM", self.opts.steps)
        self.say("the same job again, 'continuous', alone on the quiet cluster")
        self.wait_until("continuous to finish", lambda: self.ctl("jobs", "show", str(self.continuous))["state"]
                        in ("DONE", "FAILED", "CANCELLED"), limit)
        self.say("continuous finished")

    def open_nodes(self):
        return {n["name"] for n in self.ctl("nodes")["nodes"]
                if n["open"] and not n["window"].get("closed_early")}

    def running_for(self, seconds, after=0):
        """train's running segment once it is this old, newer than `after`."""
        seg = self.watch("train", self.train)
        if seg is not None and seg["state"] == "running" and seg["id"] > after and self.age(seg) >= seconds:
            return seg
        return None

    # --- the end --------------------------------------------------------------
    def segment_logs(self, job):
        d = os.path.join(self.work, "stintd.db.slurm", "job-%d" % job)
        text = ""
        for f in sorted(os.listdir(d), key=lambda n: int(re.findall(r"\d+", n)[0])):
            if f.endswith(".log"):
                text += open(os.path.join(d, f)).read()
        return text

    def held(self, job):
        """The job as stintd shows it, and its GPU-seconds held (every segment, grant to end)."""
        shown = self.ctl("jobs", "show", str(job))
        if shown["state"] != "DONE":
            self.failures.append("%s ended %s: %s" % (shown["name"], shown["state"], shown.get("message", "")))
        now_ms = time.time() * 1000
        return shown, sum(s["gpus"] * ((s.get("ended_ms") or now_ms) - s["start_ms"]) / 1000.0
                          for s in shown["segments"])

    def summary(self):
        train, held = self.held(self.train)
        _, continuous_gs = self.held(self.continuous)
        segs = train["segments"]
        log = self.segment_logs(self.train)
        stops = [int(m) for m in re.findall(r"^preempted at step (\d+):", log, re.M)][::GPUS]
        resumes = [int(m) for m in re.findall(r"^ready: resumed from step (\d+)", log, re.M)][::GPUS]
        lost = sum(max(0, stop - start) for stop, start in zip(stops, resumes[1:]))
        notices = [s["notice_reason"] for s in segs if s.get("notice_reason", "none") != "none"]
        final = r"^final step \d+ rank \d+ loss \S+ checksum (\w+)"
        got = set(re.findall(final, log, re.M))
        want = set(re.findall(final, self.segment_logs(self.continuous), re.M))
        print()
        print("== slurm_demo summary")
        print("  train: %d steps in %d segments, each a Slurm job (%s)" % (
            self.opts.steps, len(segs), ", ".join("%s on %s" % (s.get("external_id", "?"), self.node_of(s))
                                                  for s in segs)))
        print("  notices: %s; stops with a checkpoint: %d; lost steps (trained again): %d" % (
            ", ".join("%s %d" % (r, notices.count(r)) for r in sorted(set(notices))) or "none",
            len(stops), lost))
        print("  GPU-seconds held: train %.1f, continuous %.1f (same %d steps, %d GPUs)" % (
            held, continuous_gs, self.opts.steps, GPUS))
        eff = continuous_gs / held if held > 0 else 0.0
        print("  fragment-training efficiency = %.3f (target >= 0.95)" % eff)
        if len(want) == 1 and got == want:
            print("  final model vs the continuous run: bit-identical (checksum %s on every rank)" % want.pop())
        else:
            self.failures.append("final checksums differ: train %s, continuous %s" % (sorted(got), sorted(want)))
        print("  wall time: %.0fs; logs and checkpoints in %s" % (time.monotonic() - self.t0, self.work))

    def close(self):
        if self.stintd is not None:
            self.stintd.terminate()
            self.stintd.wait(timeout=60)
        if os.path.isdir(self.cluster_dir):
            subprocess.run(["bash", CLUSTER_SH, "stop", self.cluster_dir], timeout=120)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default="build", help="the CMake build directory")
    p.add_argument("--steps", type=int, default=1500, help="steps of the training job")
    p.add_argument("--step-ms", type=int, default=80, help="time per step (a stand-in for GPU time)")
    p.add_argument("--time-limit", type=int, default=600, help="seconds each phase may take")
    p.add_argument("--work-root", default=None, help="where the temporary work directory goes")
    p.add_argument("--keep-work", action="store_true", help="keep logs and checkpoints")
    opts = p.parse_args()
    missing = [t for t in ("slurmctld", "slurmd", "munged", "sbatch") if shutil.which(t) is None]
    if os.geteuid() != 0 or missing:
        print("slurm_demo: skipped: %s" % ("needs root (slurmd runs jobs as their users)"
                                          if os.geteuid() != 0 else
                                          "Slurm is not installed (%s): bash tools/setup.sh" % ", ".join(missing)))
        return 0
    demo = Demo(opts)
    ok = False
    try:
        demo.run()
        demo.summary()
        ok = not demo.failures
    except RuntimeError as e:
        demo.failures.append(str(e))
        print(open(os.path.join(demo.work, "stintd.log")).read()[-3000:])
    finally:
        demo.close()
    for f in demo.failures:
        print("  FAILED: " + f)
    if ok and not opts.keep_work:
        shutil.rmtree(demo.work, ignore_errors=True)
    print("slurm_demo: %s" % ("OK" if ok else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
