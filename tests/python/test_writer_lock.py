"""One writer per root: a trainer saving every step while another process
opens the same root, as a reader (read_only) or as a would-be second writer,
in a loop. Every step the trainer saw durable stays committed and loads; the
second writer is refused with the holder's pid and host and removes nothing.

The processes run this file as a script (`python test_writer_lock.py
trainer|reader|writer ...`); they hand-shake through files, each wait bounded.
"""

import json
import os
import socket
import subprocess
import sys
import time

import pytest
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
STEPS = 24
PROCESS_TIMEOUT = 240  # seconds per process, torch import included (2 loaded cores)
ROWS = 1 << 20  # 4 MiB of float32 per save: each save's .tmp- directory lives a while


def _state(step):
    return {"w": torch.full((ROWS,), float(step)), "step": step}


def _wait_for_file(path, what):
    deadline = time.monotonic() + PROCESS_TIMEOUT
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise TimeoutError("%s: %s did not appear within %d s" % (what, path, PROCESS_TIMEOUT))
        time.sleep(0.01)


def _touch(path):
    with open(path, "w"):
        pass


# ---- the processes -----------------------------------------------------------------

def _trainer(root, workdir):
    import stint
    ckpt = stint.Checkpointer(root, keep_last=0)  # keeps every step: each one is checked
    _touch(os.path.join(workdir, "opened"))
    _wait_for_file(os.path.join(workdir, "looping"), "trainer")  # the other side is at it
    durable, failed = [], []
    for step in range(STEPS):
        try:
            ckpt.save(step, _state(step)).durable.result(PROCESS_TIMEOUT)
            durable.append(step)
        except stint.Error as e:
            failed.append("step %d: %s" % (step, e))
    with open(os.path.join(workdir, "trainer.json"), "w") as f:
        json.dump({"durable": durable, "failed": failed}, f)
    _touch(os.path.join(workdir, "done"))
    # Open until the other side stopped: every attempt of its met a live writer.
    _wait_for_file(os.path.join(workdir, "second.json"), "trainer")
    ckpt.close()


def _second(mode, root, workdir, trainer_pid):
    import stint
    done = os.path.join(workdir, "done")
    iterations, loaded, problems = 0, 0, []
    while not os.path.exists(done):
        if mode == "reader":
            with stint.Checkpointer(root, read_only=True) as ev:
                steps = ev.list_committed()
                if steps:
                    r = ev.load_result()
                    if r.state["step"] != r.step or not bool((r.state["w"] == r.step).all()):
                        problems.append("step %d loaded wrong contents" % r.step)
                    loaded += 1
        else:
            try:
                stint.Checkpointer(root).close()
                problems.append("a second writer opened the root")
            except stint.FailedPreconditionError as e:
                holder = "pid %d on host %s" % (trainer_pid, socket.gethostname())
                if holder not in str(e):
                    problems.append("the refusal does not name %r: %s" % (holder, e))
        iterations += 1
        if iterations == 1:
            _touch(os.path.join(workdir, "looping"))
    with open(os.path.join(workdir, "second.json"), "w") as f:
        json.dump({"iterations": iterations, "loaded": loaded, "problems": problems[:5]}, f)


# ---- the tests -----------------------------------------------------------------------

def _start(args, python_env, workdir, name):
    log = open(os.path.join(workdir, name + ".log"), "w")
    return subprocess.Popen([sys.executable, os.path.abspath(__file__)] + args, env=python_env,
                            stdout=log, stderr=subprocess.STDOUT), log


def _finish(proc, log, workdir, name):
    try:
        rc = proc.wait(timeout=PROCESS_TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        rc = "killed after %d s" % PROCESS_TIMEOUT
    log.close()
    with open(os.path.join(workdir, name + ".log")) as f:
        assert rc == 0, "%s: exit %s\n%s" % (name, rc, f.read()[-4000:])


@pytest.mark.parametrize("mode", ["reader", "writer"])
def test_every_durable_step_survives_another_process_opening_the_root(mode, tmp_path,
                                                                      python_env):
    import stint
    root, workdir = str(tmp_path / "ckpt"), str(tmp_path)
    trainer, tlog = _start(["trainer", root, workdir], python_env, workdir, "trainer")
    second = slog = None
    try:
        _wait_for_file(os.path.join(workdir, "opened"), "test")
        second, slog = _start([mode, root, workdir, str(trainer.pid)], python_env, workdir,
                              "second")
    finally:
        _finish(trainer, tlog, workdir, "trainer")
        if second is not None:
            _finish(second, slog, workdir, "second")
    with open(os.path.join(workdir, "trainer.json")) as f:
        t = json.load(f)
    with open(os.path.join(workdir, "second.json")) as f:
        s = json.load(f)
    assert t["failed"] == [] and t["durable"] == list(range(STEPS)), t
    assert s["problems"] == [] and s["iterations"] >= 1, s
    # Every durable step is committed and loads with its own contents.
    with stint.Checkpointer(root, read_only=True) as ckpt:
        assert ckpt.list_committed() == list(range(STEPS))
        for step in range(STEPS):
            state = ckpt.load(step=step)
            assert state["step"] == step and bool((state["w"] == step).all())


def test_second_writer_in_this_process_is_refused_until_the_first_closes(root):
    import stint
    first = stint.Checkpointer(root)
    first.save(1, _state(1)).durable.result(60)
    with pytest.raises(stint.FailedPreconditionError) as refused:
        stint.Checkpointer(root)
    assert "pid %d on host %s" % (os.getpid(), socket.gethostname()) in str(refused.value)
    with stint.Checkpointer(root, read_only=True) as reader:  # readers open beside it
        assert reader.list_committed() == [1]
        with pytest.raises(stint.FailedPreconditionError):
            reader.save(2, _state(2))
    first.close()
    with stint.Checkpointer(root) as second:
        second.save(2, _state(2)).durable.result(60)
        assert second.list_committed() == [1, 2]


def test_lock_wait_waits_for_the_writer_to_close_and_is_bounded(root):
    import threading

    import stint
    first = stint.Checkpointer(root)
    first.save(1, _state(1)).durable.result(60)
    # Bounded: a short wait while the first writer stays open ends in the refusal.
    with pytest.raises(stint.FailedPreconditionError) as refused:
        stint.Checkpointer(root, lock_wait=0.3)
    assert "pid %d" % os.getpid() in str(refused.value)
    with pytest.raises(stint.InvalidArgumentError):
        stint.Checkpointer(root, lock_wait=-1)

    # A long wait: the second writer opens once the first closes, not before.
    trying, outcome = threading.Event(), {}

    def second_writer():
        trying.set()
        try:
            with stint.Checkpointer(root, lock_wait=120) as ckpt:
                outcome["opened_while_first_open"] = not first_closed.is_set()
                ckpt.save(2, _state(2)).durable.result(60)
                outcome["committed"] = ckpt.list_committed()
        except Exception as e:  # reported below, on the test's thread
            outcome["error"] = e

    first_closed = threading.Event()
    thread = threading.Thread(target=second_writer)
    thread.start()
    assert trying.wait(60)
    assert "committed" not in outcome and "error" not in outcome
    first_closed.set()
    first.close()
    thread.join(180)
    assert not thread.is_alive(), "the waiting writer did not open within its lock_wait"
    assert "error" not in outcome, outcome
    assert outcome == {"opened_while_first_open": False, "committed": [1, 2]}, outcome


def test_root_is_created_with_its_missing_parents(tmp_path):
    import stint
    root = tmp_path / "runs" / "job-7" / "ckpt"  # tmp_path exists; runs/ and job-7/ do not
    with stint.Checkpointer(root) as ckpt:
        ckpt.save(3, _state(3)).durable.result(60)
    with stint.Checkpointer(root, read_only=True) as ckpt:
        assert ckpt.load()["step"] == 3


if __name__ == "__main__":
    if sys.argv[1] == "trainer":
        _trainer(sys.argv[2], sys.argv[3])
    else:
        _second(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]))
