"""Slurm's task variables without a Slurm: launch_env() and
stint.distributed.init_from_env() as srun's tasks see them (two real
processes forming a Gloo group on the master the nodelist names), and the
hostlist syntax."""

import os
import socket
import subprocess
import sys

import pytest

import stint
import stint.distributed

WORKER_TIMEOUT = 240  # seconds per process: torch imported on a loaded machine


def _slurm_env(procid, ntasks, job_id, nodelist, base=None, **extra):
    env = {k: v for k, v in (base or os.environ).items()
           if not k.startswith(("SLURM_", "MASTER_", "RANK", "WORLD_SIZE", "LOCAL_RANK", "GROUP_RANK"))}
    env.update(SLURM_PROCID=str(procid), SLURM_NTASKS=str(ntasks), SLURM_LOCALID=str(procid),
               SLURM_NODEID="0", SLURM_JOB_ID=str(job_id), SLURM_JOB_NODELIST=nodelist,
               SLURM_RESTART_COUNT="2", **extra)
    return env


def test_launch_env_reads_slurm_and_expands_the_nodelist(monkeypatch):
    for k in list(os.environ):
        if k.startswith(("SLURM_", "MASTER_", "RANK", "WORLD_SIZE", "LOCAL_RANK", "GROUP_RANK")):
            monkeypatch.delenv(k)
    for k, v in _slurm_env(3, 4, 987654, "gpu[07-08]").items():
        if k.startswith("SLURM_"):
            monkeypatch.setenv(k, v)
    env = stint.launch_env()
    assert env == {"rank": 3, "world_size": 4, "local_rank": 3, "node_rank": 0,
                   "launcher": "slurm", "master_addr": "gpu07", "master_port": 15000 + 7654,
                   "job_id": "987654", "restart_count": 2}
    assert stint._C.expand_hostlist("r[1-2]n[01-02],x") == ["r1n01", "r1n02", "r2n01", "r2n02", "x"]
    with pytest.raises(stint.InvalidArgumentError, match="hostlist 'n\\[3-1\\]'"):
        stint._C.expand_hostlist("n[3-1]")
    monkeypatch.setenv("SLURM_JOB_NODELIST", "gpu[1-")
    with pytest.raises(stint.InvalidArgumentError, match="SLURM_JOB_NODELIST"):
        stint.launch_env()


_WORKER = r'''
import sys
import torch
import stint.distributed
env = stint.distributed.init_from_env(backend="gloo", timeout=120)
t = torch.tensor([float(env["rank"] + 1)])
torch.distributed.all_reduce(t)
print("rank", env["rank"], "of", env["world_size"], "sum", int(t.item()), "master",
      env["master_addr"], env["master_port"], flush=True)
torch.distributed.destroy_process_group()
'''


def test_two_srun_tasks_form_a_gloo_group_from_slurms_variables(tmp_path, python_env):
    # A free port stands in for 15000 + job id mod 10000 (it may be taken here).
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    job_id = 10000 * 7 + (port - 15000) if port >= 15000 and port < 25000 else None
    extra = {} if job_id is not None else {"MASTER_PORT": str(port)}
    job_id = job_id if job_id is not None else 4242
    script = tmp_path / "worker.py"
    script.write_text(_WORKER)
    procs = [subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True,
                              env=_slurm_env(r, 2, job_id, "localhost", python_env, **extra))
             for r in range(2)]
    outs = []
    for p in procs:
        try:
            outs.append(p.communicate(timeout=WORKER_TIMEOUT)[0])
        finally:
            p.kill()
    for r, (p, out) in enumerate(zip(procs, outs)):
        assert p.returncode == 0, out
        assert "rank %d of 2 sum 3 master localhost %d" % (r, port) in out, out
