"""Slurm's task variables without a Slurm: launch_env() and
stint.distributed.init_from_env() as srun's tasks see them (two real
processes forming a Gloo group on the master the nodelist names), and the
hostlist syntax."""

import os
import signal
import socket
import subprocess
import sys
import time

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


_STOPPING = r'''
import os, signal, sys
import torch
import stint
root = sys.argv[1]
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
run = stint.Resumable(root, model=model, optimizer=opt, save_every=0)
step = run.resume()
while True:
    model(torch.ones(2, 4)).sum().backward()
    opt.step()
    step += 1
    if step == 3:
        os.kill(os.getpid(), signal.SIGUSR1)  # Slurm's --signal warning
        assert run.watcher.wait(120)  # taken by the watcher's thread: this step stops
    if run.step_boundary(step):
        run.close()
        sys.exit(run.exit_code)
'''


def test_a_stop_under_slurm_is_recorded_in_the_root_for_the_batch_script(tmp_path, python_env):
    """Issue 41: a task that dies after its stop must still get its job
    requeued, so every task records the stop (this job, this restart, the
    step, its durable step) in ROOT/REQUEUE before step_boundary() returns;
    the batch script of `stint slurm submit` reads it."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    script, root = tmp_path / "stopping.py", tmp_path / "ckpt"
    script.write_text(_STOPPING)
    env = _slurm_env(0, 1, 4242, "localhost", python_env, MASTER_PORT=str(port),
                     STINT_SLURM_REQUEUE="script")
    p = subprocess.run([sys.executable, str(script), str(root)], env=env, capture_output=True,
                       text=True, timeout=WORKER_TIMEOUT)
    assert p.returncode == stint.EXIT_REQUEUE, p.stdout + p.stderr
    assert (root / "REQUEUE").read_text() == "slurm_job=4242 restart=2 step=3 durable=3\n"
    assert [n for n in os.listdir(root) if n.startswith("REQUEUE")] == ["REQUEUE"]


RESUMABLE_TRAINING = os.environ.get("STINT_RESUMABLE_TRAINING", "")


@pytest.mark.skipif(not RESUMABLE_TRAINING, reason="$STINT_RESUMABLE_TRAINING is not set")
def test_a_libtorch_stop_under_slurm_is_recorded_in_the_root_too(tmp_path, python_env):
    """The same record from C++ (stint::ResumableTraining, the LibTorch
    example): a LibTorch task that dies after its stop requeues its job too."""
    root, log = tmp_path / "ckpt", tmp_path / "steps.log"
    env = _slurm_env(0, 1, 4243, "localhost", python_env, STINT_SLURM_REQUEUE="script")
    proc = subprocess.Popen([RESUMABLE_TRAINING, "--ckpt-dir", str(root), "--steps", "1000000",
                             "--every", "5", "--step-ms", "5", "--log", str(log)],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + WORKER_TIMEOUT
        while not (log.exists() and log.read_text().count("\n") >= 2):  # two committed steps
            assert proc.poll() is None, proc.communicate()[0]
            assert time.monotonic() < deadline, "no committed step within %d s" % WORKER_TIMEOUT
            time.sleep(0.05)
        proc.send_signal(signal.SIGUSR1)
        out = proc.communicate(timeout=WORKER_TIMEOUT)[0]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == stint.EXIT_REQUEUE, out
    record = (root / "REQUEUE").read_text()
    fields = dict(f.split("=") for f in record.split())
    assert (fields["slurm_job"], fields["restart"]) == ("4243", "2"), record
    assert fields["durable"] == fields["step"], record  # its emergency checkpoint
    with stint.Checkpointer(str(root), collective=False, read_only=True) as ckpt:
        assert int(fields["step"]) == ckpt.list_committed()[-1]
