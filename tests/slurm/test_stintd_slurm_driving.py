"""How stintd --slurm drives a real Slurm 22.05 cluster (two `slurmd -N`
nodes of four fake GPUs) where the cluster is not stintd's alone or not
always quick: other users' jobs on its nodes, a site's sbatch that warns,
Slurm commands that hang or fail, and a stintd restart. The jobs are shell
commands (no training): what is checked is what Slurm ran and what stintd
made of it. Each test runs its own stintd; every wait has a deadline.
"""

import glob
import itertools
import json
import os
import shutil
import subprocess
import time

import pytest

from conftest import run, slurm_cluster, tool

ADMIN_TOKEN = "stint-slurm-driving-admin-token"
DEADLINE = 300  # seconds for what Slurm does on its 30 s cadence, on a loaded host
_TAGS = itertools.count()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with slurm_cluster(tmp_path_factory, nodes=2, gpus=4) as (env, nodes):
        yield env, nodes
        # Other users' jobs of a test end with it; the cluster's stop ends the rest.


def _wrappers(d, scripts):
    """A directory of executables named like Slurm's commands, first in
    PATH: `scripts` maps a command to a shell body run before the real one
    (its absolute path in $REAL)."""
    os.makedirs(d, exist_ok=True)
    for name, body in scripts.items():
        path = os.path.join(d, name)
        with open(path, "w") as f:
            f.write('#!/bin/bash\nREAL=%s\n%s\nexec "$REAL" "$@"\n' % (shutil.which(name), body))
        os.chmod(path, 0o755)
    return d


class Stintd:
    """stintd --slurm over the cluster's "low" partition, with `path_first`
    (wrappers) ahead of Slurm's commands in its PATH, and a Slurm tag of its
    own (the tests' stintds share the cluster)."""

    def __init__(self, env, d, path_first=None, extra=()):
        os.makedirs(d)
        self.d, self.db = d, os.path.join(d, "stintd.db")
        self.env = dict(env, STINTD_ADMIN_TOKEN=ADMIN_TOKEN,
                        STINTD_WORKER_TOKEN="stint-slurm-driving-worker-token")
        if path_first:
            self.env["PATH"] = path_first + os.pathsep + self.env["PATH"]
        self.log = os.path.join(d, "stintd.log")
        self.tag = "t%d" % next(_TAGS)  # its Slurm jobs' names: stint.<tag>.<segment>
        self.extra = list(extra)
        self.proc = None
        self.start()

    def start(self):
        log = open(self.log, "a")
        self.proc = subprocess.Popen(
            [tool("STINTD_BIN"), "--db", self.db, "--listen", "127.0.0.1:0",
             "--slurm", "--slurm-partition", "low", "--slurm-poll-seconds", "1",
             "--slurm-tag", self.tag,
             "--min-run-seconds", "0", "--tick-seconds", "0.5"] + self.extra,
            env=self.env, stdout=subprocess.PIPE, stderr=log, text=True)
        log.close()
        line = self.proc.stdout.readline()  # "stintd: listening on HOST:PORT" once it serves
        assert line.startswith("stintd: listening on "), line + self.text()
        self.ctl_env = dict(self.env, STINTD_URL="http://" + line.split()[-1],
                            STINTD_TOKEN=ADMIN_TOKEN)

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=60)
        self.proc = None

    def text(self):
        return open(self.log).read()[-4000:]

    def ctl(self, *args):
        return json.loads(run(self.ctl_env, tool("STINTCTL_BIN"), "--json", *args))

    def windows(self):
        """node -> (window id, its GPUs) of the open windows not closing."""
        return {n["name"]: (n["window"]["id"], len(n["gpus"])) for n in self.ctl("nodes")["nodes"]
                if n["open"] and not n["window"].get("closed_early")}


@pytest.fixture
def stintd_factory(cluster, tmp_path):
    made = []

    def make(**kwargs):
        s = Stintd(cluster[0], str(tmp_path / ("stintd%d" % len(made))), **kwargs)
        made.append(s)
        return s

    yield make
    for s in made:
        s.stop()


def _wait(what, cond, seconds, why):
    deadline = time.monotonic() + seconds
    while not cond():
        if time.monotonic() > deadline:
            pytest.fail("%s not reached in %d s\n%s" % (what, seconds, why()))
        time.sleep(0.5)


def _wait_ended(s, job, why):
    """Waits until stintd's job `job` ended; asserts it is DONE."""
    state = lambda: s.ctl("jobs", "show", str(job))["state"]
    _wait("job %d ended" % job, lambda: state() in ("DONE", "FAILED", "CANCELLED"), DEADLINE, why)
    assert state() == "DONE", why()


def _foreign(env, node, *args):
    """Another user's job on `node` (sleeps until cancelled); its id once
    it runs."""
    job = run(env, "sbatch", "--parsable", "-w", node, "-o", "/dev/null", *args,
              "--wrap", "sleep 3600").strip()
    _wait("foreign job %s running" % job,
          lambda: run(env, "squeue", "-h", "-j", job, "-o", "%T").strip() == "RUNNING", 120,
          lambda: run(env, "squeue"))
    return job


def test_other_jobs_gpus_a_warning_sbatch_and_a_job_name_with_a_newline(cluster, stintd_factory,
                                                                       tmp_path):
    """Node 1 runs another user's CPU-only job, node 2 one holding 2 of its
    4 GPUs. stintd lends node 1 whole and node 2's 2 free GPUs; a 6-GPU job
    is placed [4, 2] and Slurm runs it, each node asked for what it has
    there; the site's sbatch prints a warning on stderr, which is logged,
    not taken for the job id; the job's name carries a newline and a
    command, which never reaches the batch script as a line."""
    env, nodes = cluster
    cpu_job = _foreign(env, nodes[0])
    gpu_job = _foreign(env, nodes[1], "--gres=gpu:2")
    wrappers = _wrappers(str(tmp_path / "bin"), {
        "sbatch": 'echo "sbatch: warning: job_submit.lua: jobs of this site are audited" >&2'})
    s = stintd_factory(path_first=wrappers)
    why = lambda: s.text() + "\n" + run(env, "squeue", "-t", "all")
    try:
        _wait("windows of 4 and 2 GPUs", lambda: {n: g for n, (_, g) in s.windows().items()} ==
              {nodes[0]: 4, nodes[1]: 2}, 60, why)
        out = str(tmp_path / "out")
        os.makedirs(out)
        pwned = str(tmp_path / "pwned")
        job = s.ctl("jobs", "submit", "--name", "x\ntouch " + pwned + "\n#", "--gpus", "6",
                    "--pool", "low", "--", "/bin/sh", "-c",
                    'echo "$RANK $WORLD_SIZE $SLURMD_NODENAME" > "$0/rank-$RANK"', out)["id"]
        _wait_ended(s, job, why)
    finally:
        run(env, "scancel", cpu_job, gpu_job)
    ranks = [open(f).read().split() for f in glob.glob(os.path.join(out, "rank-*"))]
    assert sorted(int(r) for r, _, _ in ranks) == list(range(6)), ranks
    assert {w for _, w, _ in ranks} == {"6"}, ranks
    per_node = {n: sum(1 for _, _, at in ranks if at == n) for n in nodes}
    assert per_node == {nodes[0]: 4, nodes[1]: 2}, ranks
    seg = s.ctl("jobs", "show", str(job))["segments"][-1]
    slurm_job = seg["external_id"].split(":")[1]
    # One component per node: 4 GPUs asked on node 1, 2 on node 2.
    shown = run(env, "scontrol", "show", "job", slurm_job)
    assert "TresPerNode=gres:gpu:4" in shown and "TresPerNode=gres:gpu:2" in shown, shown
    assert "sbatch says: sbatch: warning: job_submit.lua" in s.text(), why()
    script = open(glob.glob(os.path.join(s.db + ".slurm", "job-%d" % job, "*.sh"))[0]).read()
    assert not any(line.startswith("touch") for line in script.splitlines()), script
    assert not os.path.exists(pwned)


def test_slurm_commands_that_hang_and_fail_close_no_window(cluster, stintd_factory, tmp_path):
    """`scontrol show node` hangs longer than the node TTL and then fails
    (a slurmctld restart, an overloaded controller), twice: the windows
    stay open, the same ones, since Slurm never said a node went away.
    (sinfo answers in the layout of 23.02+, {"sinfo": [...]}, which stintd
    does not depend on: it reads nodes through scontrol.)"""
    env, nodes = cluster
    flag, calls = str(tmp_path / "slow"), str(tmp_path / "calls")
    ttl = 6
    wrappers = _wrappers(str(tmp_path / "bin"), {"scontrol": """
if [ "$1 $2" = "show node" ] && [ -e %s ]; then
  sleep %d
  echo failed >> %s
  echo "scontrol: error: Unable to contact slurm controller (connect failure)" >&2
  exit 1
fi""" % (flag, ttl + 2, calls),
        "sinfo": """echo '{"meta": {}, "errors": [], "warnings": [], "sinfo": []}'; exit 0"""})
    s = stintd_factory(path_first=wrappers, extra=["--node-ttl-seconds", str(ttl)])
    why = lambda: s.text()
    _wait("both windows", lambda: set(s.windows()) == set(nodes), 60, why)
    before = s.windows()
    open(flag, "w").close()
    _wait("two reads of the cluster that hung past the TTL and failed",
          lambda: os.path.exists(calls) and len(open(calls).read().split()) >= 2, 120, why)
    assert s.windows() == before, why()
    os.remove(flag)
    assert "cannot read the cluster" in s.text(), why()


def test_a_restarted_stintd_never_submits_a_segment_whose_job_slurm_forgot(cluster, stintd_factory,
                                                                           tmp_path):
    """stintd stops while three segments' Slurm jobs run; they end (one
    exits 0, one 76, one 0) and Slurm forgets them (past MinJobAge: squeue,
    wrapped here, no longer lists them) before stintd starts again. The
    restarted stintd knows from its store that they were submitted, and asks
    Slurm's job-completion log (sacct --completion: this cluster has no
    accounting storage) how they ended: the first job is DONE, the second
    FAILED, each having run once; the third, which sacct (wrapped here) does
    not know, is queued again as a new segment (resuming). None is submitted
    a second time."""
    env, nodes = cluster
    forgot, unknown = str(tmp_path / "forgot"), str(tmp_path / "unknown")
    # What squeue prints once MinJobAge purged the jobs whose ids `forgot`
    # lists, and sacct where its records lack those `unknown` lists.
    wrappers = _wrappers(str(tmp_path / "bin"), {"squeue": """
if [ -e %s ] && [ "$1" = "--json" ]; then
  "$REAL" "$@" | python3 -c '
import json, sys
forgot = set(open(sys.argv[1]).read().split())
d = json.load(sys.stdin)
d["jobs"] = [j for j in d["jobs"] if str(j["job_id"]) not in forgot]
json.dump(d, sys.stdout)' %s
  exit ${PIPESTATUS[0]}
fi""" % (forgot, forgot), "sacct": """
if [ -e %s ]; then
  "$REAL" "$@" | grep -v -F -f <(sed 's/.*/&|/' %s)
  exit ${PIPESTATUS[0]}
fi""" % (unknown, unknown)})
    s = stintd_factory(path_first=wrappers)
    why = lambda: s.text() + "\n" + run(env, "squeue", "-t", "all")
    _wait("both windows", lambda: set(s.windows()) == set(nodes), 60, why)
    out = str(tmp_path / "out")
    os.makedirs(out)
    # Each run appends a line to its file, then waits for `go` (made while
    # stintd is down) and exits with its code.
    jobs, runs = {}, {}
    for name, code in (("done", 0), ("failed", 76), ("unknown", 0)):
        runs[name] = os.path.join(out, name)
        jobs[name] = s.ctl(
            "jobs", "submit", "--name", name, "--gpus", "1", "--pool", "low", "--", "/bin/sh",
            "-c", 'echo "$STINT_SEGMENT_ID" >> "$0"; while [ ! -e "$1" ]; do sleep 0.2; done; '
            'exit $2', runs[name], os.path.join(out, "go"), str(code))["id"]
    _wait("the jobs running in Slurm", lambda: all(map(os.path.exists, runs.values())), DEADLINE,
          why)
    first = {n: s.ctl("jobs", "show", str(j))["segments"][-1] for n, j in jobs.items()}
    slurm_jobs = {n: seg["external_id"].split(":")[1] for n, seg in first.items()}
    s.stop()
    open(os.path.join(out, "go"), "w").close()
    state = lambda n: run(env, "squeue", "-h", "-t", "all", "-j", slurm_jobs[n], "-o",
                          "%T").strip()
    _wait("their Slurm jobs ended",
          lambda: [state(n) for n in jobs] == ["COMPLETED", "FAILED", "COMPLETED"], DEADLINE, why)
    with open(unknown, "w") as f:
        f.write(slurm_jobs["unknown"])
    with open(forgot, "w") as f:
        f.write(" ".join(slurm_jobs.values()))
    s.start()
    shown = lambda n: s.ctl("jobs", "show", str(jobs[n]))["state"]
    _wait("the jobs ended", lambda: all(shown(n) in ("DONE", "FAILED", "CANCELLED") for n in jobs),
          DEADLINE, why)
    assert [shown(n) for n in jobs] == ["DONE", "FAILED", "DONE"], why()
    for n in jobs:
        name = "stint.%s.%d" % (s.tag, first[n]["id"])
        submitted = run(env, "squeue", "-h", "-t", "all", "--name", name, "-o", "%i").split()
        assert submitted == [slurm_jobs[n]], why()
    segments = {n: [l.strip() for l in open(runs[n])] for n in jobs}
    assert segments["done"] == [str(first["done"]["id"])], segments
    assert segments["failed"] == [str(first["failed"]["id"])], segments
    assert segments["unknown"][0] == str(first["unknown"]["id"]), segments
    assert len(segments["unknown"]) == 2, segments
    text = s.text()
    for n, said in (("done", "COMPLETED (exit 0)"), ("failed", "FAILED (exit 76)")):
        assert "its Slurm job %s is gone from squeue; Slurm job %s %s, says sacct --completion" % (
            slurm_jobs[n], slurm_jobs[n], said) in text, why()
    assert "its Slurm job %s is gone from squeue and how it ended is unknown " \
           "(sacct --completion does not know it)" % slurm_jobs["unknown"] in text, why()
