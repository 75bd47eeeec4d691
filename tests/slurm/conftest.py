"""What the Slurm tests share: a private cluster per test module
(tools/slurm/cluster.sh), skipped with the reason only where Slurm cannot
run, and small helpers for commands and the jobs' line files."""

import contextlib
import os
import shutil
import subprocess

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
CLUSTER_SH = os.path.join(REPO, "tools", "slurm", "cluster.sh")


@contextlib.contextmanager
def slurm_cluster(tmp_path_factory, nodes, gpus):
    """Starts a cluster of `nodes` x `gpus`; yields (environment for its
    commands, node names); stops it."""
    if os.geteuid() != 0:
        pytest.skip("a Slurm cluster needs root here (slurmd runs jobs as their users)")
    missing = [t for t in ("slurmctld", "slurmd", "munged", "sbatch") if shutil.which(t) is None]
    if missing:
        pytest.skip("Slurm is not installed (%s missing): bash tools/setup.sh" % ", ".join(missing))
    d = str(tmp_path_factory.mktemp("slurm") / "cluster")
    prefix = "s%dn" % (os.getpid() % 100000)  # unique to this run (the names go to /etc/hosts)
    subprocess.run(["bash", CLUSTER_SH, "start", d, "--nodes", str(nodes), "--gpus", str(gpus),
                    "--prefix", prefix], check=True, timeout=120)
    # The jobs import the stint under test (sbatch passes the environment on).
    env = dict(os.environ, SLURM_CONF=os.path.join(d, "slurm.conf"),
               PYTHONPATH=os.environ.get("STINT_PYTHON_PATH", ""))
    try:
        yield env, ["%s%d" % (prefix, i) for i in range(1, nodes + 1)]
    finally:
        subprocess.run(["bash", CLUSTER_SH, "stop", d], timeout=120)


def run(env, *args, timeout=60, cwd=None):
    """Runs a command to success (in `cwd`, else here); its stdout."""
    r = subprocess.run(list(args), env=env, capture_output=True, text=True, timeout=timeout, cwd=cwd)
    assert r.returncode == 0, "%s: exit %d\n%s%s" % (" ".join(args), r.returncode, r.stdout, r.stderr)
    return r.stdout


def lines(path):
    """A job's line file (KEY=VALUE words per line) as dicts; [] if missing."""
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [dict(kv.split("=", 1) for kv in line.split()) for line in f if line.strip()]


def digests(out, world):
    """The final parameters' digest of each rank (resumable_job.py)."""
    return [open(os.path.join(out, "final-rank%d" % r)).read() for r in range(world)]


def tool(name):
    """A stint binary ctest names in the environment (STINT_CLI, STINTD_BIN, ...)."""
    path = os.environ.get(name)
    if not path:
        pytest.skip("%s is not set: run through ctest" % name)
    return path
