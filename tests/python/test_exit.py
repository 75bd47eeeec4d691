"""Exit codes at interpreter exit: what a process chose is what it exits with.

The README's pattern, `if run.step_boundary(step): sys.exit(stint.EXIT_REQUEUE)`
without run.close(), in a 2-rank Gloo job (two plain processes, SIGUSR1 to
both) must exit 75 on every rank: a rank's persist thread still cleaning its
keys off the torch.distributed store when the interpreter finalizes used to
be ended inside a destructor (SIGABRT, "terminate called without an active
exception"), in about half the runs. The same for a daemon thread waiting in
stint (the preemption callback thread, a user's thread in watcher.wait())
when the interpreter finalizes.

Workers are this file run as a script (`test_exit.py rank ROOT OUT` or
`test_exit.py daemon`).
"""

import os
import signal
import socket
import subprocess
import sys
import time

import pytest

LAUNCH_DEADLINE = 300.0  # two processes importing torch on a loaded 2-core machine, then one save
RUNS = 4  # the race showed in about half the runs: 4 runs miss it with probability 1/16


# -- the workers --------------------------------------------------------------------------------

def rank_worker(root, out):
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    import stint

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.Linear(32, 1))
    ddp = DistributedDataParallel(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    run = stint.Resumable(root, model=model, optimizer=opt, save_every=0, grace=120)
    step = run.resume()
    data = torch.randn(16, 8, generator=torch.Generator().manual_seed(1))
    ready = os.path.join(out, "ready-rank%d" % rank)
    while True:
        loss = ddp(data).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        step += 1
        if not os.path.exists(ready):
            open(ready, "w").close()
        if run.step_boundary(step):  # the README's pattern, as users write it: no close()
            with open(os.path.join(out, "stopped-rank%d" % rank), "w") as f:
                f.write(str(step))
            sys.exit(stint.EXIT_REQUEUE)


class _SlowFinalizer:
    """Makes the interpreter's finalization outlast the 50 ms slices a
    waiting thread wakes in, so it wakes while finalizing."""

    def __del__(self):
        time.sleep(0.5)


def daemon_worker():
    import threading

    import stint

    watcher = stint.PreemptionWatcher(callback=lambda notice: None)
    waiting = threading.Event()

    def wait_forever():
        waiting.set()
        watcher.wait()

    threading.Thread(target=wait_forever, daemon=True).start()
    waiting.wait()
    globals()["slow"] = _SlowFinalizer()
    sys.exit(stint.EXIT_REQUEUE)


# -- the tests ----------------------------------------------------------------------------------

def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for_file(path, procs, deadline, logs):
    while not os.path.exists(path):
        if any(p.poll() is not None for p in procs) or time.monotonic() > deadline:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
            pytest.fail("no %s; exits %s; logs:\n%s" % (
                os.path.basename(path), [p.returncode for p in procs], _read_all(logs)))
        time.sleep(0.05)


def _read_all(logs):
    text = []
    for path in logs:
        with open(path, errors="replace") as f:
            text.append("== %s ==\n%s" % (path, f.read()[-4000:]))
    return "\n".join(text)


def test_the_documented_preemption_exit_exits_75_on_every_rank(tmp_path, python_env):
    import stint
    env = dict(python_env, OMP_NUM_THREADS="1", MASTER_ADDR="127.0.0.1", WORLD_SIZE="2")
    for run in range(RUNS):
        root = str(tmp_path / ("ckpt%d" % run))
        out = str(tmp_path / ("out%d" % run))
        os.makedirs(out)
        env["MASTER_PORT"] = str(_free_port())
        logs = [os.path.join(out, "rank%d.log" % r) for r in (0, 1)]
        procs = []
        for r in (0, 1):
            with open(logs[r], "w") as log:
                procs.append(subprocess.Popen(
                    [sys.executable, os.path.abspath(__file__), "rank", root, out],
                    env=dict(env, RANK=str(r), LOCAL_RANK=str(r), LOCAL_WORLD_SIZE="2"), stdout=log, stderr=subprocess.STDOUT))
        deadline = time.monotonic() + LAUNCH_DEADLINE
        for r in (0, 1):
            _wait_for_file(os.path.join(out, "ready-rank%d" % r), procs, deadline, logs)
        for p in procs:
            p.send_signal(signal.SIGUSR1)
        codes = []
        for p in procs:
            try:
                codes.append(p.wait(timeout=max(1.0, deadline - time.monotonic())))
            except subprocess.TimeoutExpired:
                for q in procs:
                    q.kill()
                    q.wait()
                pytest.fail("run %d: still running past the deadline; logs:\n%s" % (run, _read_all(logs)))
        assert codes == [stint.EXIT_REQUEUE] * 2, "run %d: exits %s; logs:\n%s" % (
            run, codes, _read_all(logs))
        assert "terminate called" not in _read_all(logs)
        stopped = set()
        for r in (0, 1):
            with open(os.path.join(out, "stopped-rank%d" % r)) as f:
                stopped.add(int(f.read()))
        assert len(stopped) == 1, stopped
        with stint.Checkpointer(root, collective=False, read_only=True) as ckpt:
            assert ckpt.list_committed() == sorted(stopped)  # the emergency checkpoint


def test_a_daemon_thread_waiting_in_stint_does_not_change_the_exit_code(tmp_path, python_env):
    import stint
    log = str(tmp_path / "daemon.log")
    with open(log, "w") as f:
        proc = subprocess.run([sys.executable, os.path.abspath(__file__), "daemon"],
                              env=python_env, stdout=f, stderr=subprocess.STDOUT,
                              timeout=LAUNCH_DEADLINE)
    with open(log, errors="replace") as f:
        text = f.read()
    assert proc.returncode == stint.EXIT_REQUEUE, "exit %s; log:\n%s" % (proc.returncode, text)
    assert "terminate called" not in text, text


if __name__ == "__main__":
    if sys.argv[1] == "rank":
        rank_worker(sys.argv[2], sys.argv[3])
    else:
        daemon_worker()
