"""Helpers shared by the stint pytest files."""

import os
import subprocess

import pytest
import torch


def root_entries(root):
    """A checkpoint root's entries, sorted, without SAVE_TIMES (advisory: the
    writer records it after each commit is reported, so it may lag)."""
    return sorted(n for n in os.listdir(root) if n != "SAVE_TIMES")


def same_bits(a, b):
    """True when two tensors have the same dtype, shape and bytes (NaNs and -0.0 included)."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    a = a.detach().cpu().contiguous().reshape(-1)
    b = b.detach().cpu().contiguous().reshape(-1)
    if a.numel() == 0:
        return True
    return bytes(a.view(torch.uint8).reshape(-1).numpy()) == bytes(b.view(torch.uint8).reshape(-1).numpy())


def assert_same_tree(a, b, path="state"):
    """Equal structure, types and values; tensors bit for bit."""
    assert type(a) is type(b), "%s: %s vs %s" % (path, type(a).__name__, type(b).__name__)
    if isinstance(a, torch.Tensor):
        assert same_bits(a, b), "%s: tensors differ" % path
        assert a.requires_grad == b.requires_grad, "%s: requires_grad differs" % path
    elif isinstance(a, dict):
        assert list(a.keys()) == list(b.keys()), "%s: keys %s vs %s" % (path, list(a), list(b))
        for k in a:
            assert type(k) is type(list(b.keys())[list(a.keys()).index(k)])
            assert_same_tree(a[k], b[k], "%s[%r]" % (path, k))
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), "%s: lengths %d vs %d" % (path, len(a), len(b))
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same_tree(x, y, "%s[%d]" % (path, i))
    elif isinstance(a, float):
        assert a.hex() == b.hex(), "%s: %r vs %r" % (path, a, b)
    else:
        assert a == b, "%s: %.80r vs %.80r" % (path, a, b)


def run_and_exit(fn, *args):
    """Runs a worker script's fn(*args), then exits the process without
    interpreter finalization (the atexit handlers run first, as on a normal
    exit; the exit code is the one SystemExit or an exception would give).

    Why: PyTorch's Gloo process groups outlive destroy_process_group() (their
    pt_gloo_runloop threads are still there at exit). A runloop thread that
    drops the last reference to a tensor of Python's after finalization began
    takes the GIL, is ended by CPython (pthread_exit), and the unwind through
    its noexcept frames is std::terminate: the rank dies of SIGABRT ("terminate
    called without an active exception") after it finished. It needs no stint
    at all: an FSDP2 step, a barrier and destroy_process_group() abort 2 of 36
    processes when those threads run at SCHED_IDLE on a busy machine. CI saw it
    once on a loaded machine (test_dcp, a 3-rank load).
    """
    import atexit
    import sys
    import traceback
    code = 0
    try:
        fn(*args)
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if not isinstance(e.code, (int, type(None))):
            print(e.code, file=sys.stderr)
    except BaseException:  # noqa: B902  (what Python would print and exit 1 with)
        traceback.print_exc()
        code = 1
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def run_ranks(script, args, world, env, log_dir, name, timeout):
    """Runs `python script *args` as ranks 0..world-1 (RANK, WORLD_SIZE, LOCAL_RANK set).

    Every process is waited for at most `timeout` seconds and killed past it;
    fails with each failed rank's output tail if one exits non-zero.
    """
    import os
    import subprocess
    import sys
    procs, logs = [], []
    for rank in range(world):
        log = open(os.path.join(str(log_dir), "%s-rank%d.log" % (name, rank)), "w+b")
        logs.append(log)
        procs.append(subprocess.Popen(
            [sys.executable, os.path.abspath(script)] + list(args),
            env=dict(env, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world)),
            stdout=log, stderr=subprocess.STDOUT))
    try:
        for p in procs:
            try:
                p.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                pass
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(timeout=10)
    failed = []
    for rank, (p, log) in enumerate(zip(procs, logs)):
        log.seek(0)
        text = log.read().decode(errors="replace")
        log.close()
        if p.returncode != 0:
            failed.append("rank %d of %s exited %s:\n%s" % (rank, name, p.returncode,
                                                            text[-6000:]))
    assert not failed, "\n".join(failed)


def run_output(tmp):
    """The end of what a framework test's run wrote to tmp/out.txt."""
    return (tmp / "out.txt").read_bytes().decode(errors="replace")[-6000:]


def finish_run(p, tmp, timeout):
    """Waits for a framework test's run; one still going after `timeout` is
    killed and fails the test with its output."""
    import pytest
    try:
        return p.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
        pytest.fail("run did not end in %d s:\n%s" % (timeout, run_output(tmp)))


def start_example(script, tmp, env, steps, world=1, *args):
    """An example's training run in the background: `script --out tmp/run
    --steps N --record tmp/rec ARGS`, under torchrun (--standalone) when
    world > 1, its output appended to tmp/out.txt, in its own session."""
    import sys
    cmd = [sys.executable, script]
    if world > 1:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
               "--nproc-per-node", str(world), script]
    out = open(tmp / "out.txt", "ab")
    return subprocess.Popen(cmd + ["--out", str(tmp / "run"), "--steps", str(steps),
                                   "--record", str(tmp / "rec")] + list(args),
                            env=env, cwd=str(tmp), stdout=out, stderr=subprocess.STDOUT,
                            start_new_session=True)


def read_records(tmp):
    """tmp/rec's "step loss total" lines: {step: [(loss, total), ...]}, one
    entry per time the step was trained (a resumed run trains some again)."""
    out = {}
    for line in (tmp / "rec").read_text().splitlines():
        step, loss, total = line.split()
        out.setdefault(int(step), []).append((loss, total))
    return out


def assert_replayed(got, reference, steps, retrained=None):
    """A resumed run's records (read_records) against an uninterrupted run's:
    every step 1..steps trained, each time with the reference's values;
    with `retrained`, exactly those steps trained twice."""
    assert sorted(got) == list(range(1, steps + 1))
    if retrained is not None:
        assert [s for s, v in got.items() if len(v) == 2] == list(retrained)
    for step, values in got.items():
        assert all(v == reference[step][0] for v in values), (step, values, reference[step])

