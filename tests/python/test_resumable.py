"""stint.Resumable in one process: periodic saves, preemption at a step
boundary, resume of every registered piece, damaged checkpoints."""

import os
import random
import signal
import subprocess
import sys
import time

import pytest
import torch

import stint
from util import same_bits


def _setup(seed=0):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Dropout(0.2), torch.nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=3, gamma=0.5)
    sampler = stint.ResumableSampler(40, 4, seed=1, rank=0, world_size=1)
    return model, opt, sched, sampler


def _step(model, opt, sched, sampler):
    ids = next(iter(sampler))
    x = torch.stack([torch.full((4,), float(i)) for i in ids]) / 40
    loss = model(x).pow(2).mean() + random.random() * 0  # touches Python's RNG
    opt.zero_grad()
    loss.backward()
    opt.step()
    sched.step()


def _resumable(root, parts, **kw):
    model, opt, sched, sampler = parts
    return stint.Resumable(root, model=model, optimizer=opt, sampler=sampler, objects={"sched": sched},
                           **kw)


def test_preempt_and_resume_in_process(root):
    parts = _setup()
    plans = []
    run = _resumable(root, parts, save_every=4, on_preemption=plans.append)
    assert run.resume() == 0
    run.user_state["tokens"] = 0
    step = 0
    while True:
        _step(*parts)
        step += 1
        run.user_state["tokens"] += 4
        if step == 6:
            noticed = time.monotonic()
            run.watcher.notify("test", 60)
            # The notice ages well past what the emergency save takes here,
            # so a figure counted from the save's start falls short of it.
            while run.watcher.notice().seconds_since_received < 0.5:
                time.sleep(0.01)
            ahead = run.watcher.notice().seconds_since_received
        if run.step_boundary(step):
            break
    stopped = time.monotonic()
    assert step == 6 and run.exit_code == stint.EXIT_REQUEUE
    assert plans and plans[0].save and run.last_durable_step == 6
    # Notice -> durable and replicated, counted from the notice itself.
    assert ahead <= run.notice_to_replicas_seconds <= stopped - noticed
    assert run.checkpointer.list_committed() == [4, 6]
    expected = {k: v.clone() for k, v in parts[0].state_dict().items()}
    for _ in range(3):  # what the uninterrupted run does next
        _step(*parts)
    after = {k: v.clone() for k, v in parts[0].state_dict().items()}
    run.close()

    fresh = _setup(seed=5)
    run2 = _resumable(root, fresh)
    assert run2.resume() == 6
    assert run2.user_state == {"tokens": 24}
    assert fresh[3].committed_steps == 6 and fresh[2].last_epoch == 6
    for k, v in fresh[0].state_dict().items():
        assert same_bits(v, expected[k]), k
    for _ in range(3):
        _step(*fresh)
    for k, v in fresh[0].state_dict().items():
        assert same_bits(v, after[k]), k  # dropout RNG, momentum, LR schedule, data order all restored
    run2.finish(9)
    assert run2.checkpointer.latest_step() == 9
    run2.close()


def test_resume_skips_and_quarantines_a_damaged_checkpoint(root):
    parts = _setup()
    with _resumable(root, parts, save_every=2, watch_signals=False) as run:
        for step in (1, 2, 3, 4):
            _step(*parts)
            run.step_boundary(step)
        run.finish(4)
    data = os.path.join(root, "step-00000004", "rank-00000.stint")
    with open(data, "r+b") as f:
        f.seek(8)
        f.write(b"\xff\xff")
    # The run finished (COMPLETE); resume it anyway, to see what it loads.
    with _resumable(root, _setup(), watch_signals=False, exit_if_complete=False) as run:
        assert run.resume() == 2
        assert run.resume_skipped and "checksum mismatch" in run.resume_skipped[0]
        assert run.checkpointer.list_committed() == [2]
    assert any(n.startswith("quarantine-step-00000004") for n in os.listdir(root))


def test_resume_with_a_changed_model_or_missing_object(root):
    parts = _setup()
    with _resumable(root, parts, watch_signals=False) as run:
        _step(*parts)
        run.finish(1)
    model, opt, sched, sampler = _setup()
    bigger = torch.nn.Sequential(torch.nn.Linear(4, 9), torch.nn.Dropout(0.2), torch.nn.Linear(9, 1))
    with stint.Resumable(root, model=bigger, watch_signals=False, exit_if_complete=False) as run:
        with pytest.raises(stint.InvalidArgumentError, match="has shape"):
            run.resume()
    with stint.Resumable(root, model=model, optimizer=opt, objects={"other": sched},
                         watch_signals=False, exit_if_complete=False) as run:
        with pytest.raises(stint.FailedPreconditionError, match="no state for object 'other'"):
            run.resume()
    changed = stint.ResumableSampler(41, 4, seed=1, rank=0, world_size=1)
    with stint.Resumable(root, model=model, optimizer=opt, sampler=changed, watch_signals=False,
                         exit_if_complete=False) as run:
        with pytest.raises(stint.FailedPreconditionError, match="dataset_size|size"):
            run.resume()


# A run through the public API that reports the end of its run ("done"),
# then winds down until its stdin closes: the test's SIGTERM arrives then.
_WIND_DOWN = r'''
import sys
import torch
import stint

model = torch.nn.Linear(2, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
run = stint.Resumable(sys.argv[1], model=model, optimizer=opt, save_every=0)
for step in range(1, 4):
    model(torch.ones(2)).sum().backward()
    opt.step()
    if sys.argv[2] == "preempted" and step == 2:
        run.watcher.notify("test", 60)
    if run.step_boundary(step):
        break
else:
    run.finish(step)
run.close()
print("done", run.exit_code, flush=True)
sys.stdin.read()
sys.exit(run.exit_code)
'''


@pytest.mark.parametrize("ending,code", [("finished", 0), ("preempted", stint.EXIT_REQUEUE)])
def test_a_signal_after_the_run_ended_does_not_change_its_exit_code(tmp_path, python_env, ending,
                                                                    code):
    """A SIGTERM once finish() completed (or step_boundary() decided to stop),
    while the process tears down, is dropped: exit 0 (or 75), not death by SIGTERM."""
    script = tmp_path / "wind_down.py"
    script.write_text(_WIND_DOWN)
    proc = subprocess.Popen([sys.executable, str(script), str(tmp_path / "ckpt"), ending],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            env=python_env, text=True)
    try:
        lines = []
        for line in proc.stdout:  # until the run reports its end (or the process exits)
            lines.append(line)
            if line.startswith("done"):
                break
        assert lines and lines[-1] == "done %d\n" % code, "".join(lines)
        os.kill(proc.pid, signal.SIGTERM)  # pending on the process once kill() returns
        proc.stdin.close()
        assert proc.wait(timeout=120) == code, "".join(lines) + proc.stdout.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


class _AugmentedData(torch.utils.data.Dataset):
    """Sample i, with augmentation noise drawn from the global torch RNG (as
    transforms in the main process do)."""

    def __len__(self):
        return 40

    def __getitem__(self, i):
        return torch.full((4,), i / 40.0) + 0.01 * torch.randn(4), i


def _loader_parts(kind, own_generator):
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Dropout(0.3), torch.nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    generator = torch.Generator().manual_seed(5) if own_generator else None
    if kind == "stateful":
        # torchdata's loader saves its own position (tools/setup.sh installs it).
        from torchdata.stateful_dataloader import StatefulDataLoader as loader_class
    else:
        loader_class = torch.utils.data.DataLoader
    loader = loader_class(_AugmentedData(), batch_size=4, shuffle=True, generator=generator)
    return model, opt, loader


def _train_through(run, model, opt, step, total, seen, notice_at=None):
    """The loop of the module doc; returns the step it ended at."""
    while step < total:
        for x, ids in run.iterate():
            loss = model(x).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            step += 1
            seen.append(ids.tolist())
            if step == notice_at:
                run.watcher.notify("test", 60)
            if run.step_boundary(step):
                return step
            if step >= total:
                break
    return step


@pytest.mark.parametrize("kind", ["dataloader", "stateful"])
@pytest.mark.parametrize("own_generator", [True, False])
def test_resume_with_a_shuffling_dataloader_is_exact(tmp_path, kind, own_generator):
    """A DataLoader or torchdata's StatefulDataLoader (RandomSampler,
    augmentation from the global RNG, dropout) resumed mid-epoch through
    Resumable(loader=) and iterate(): the same batches, the same noise, the
    same parameters as without the stop."""
    total = 25  # 10 batches per epoch: the stop at 13 is 3 batches into the second epoch
    torch.manual_seed(1)
    model, opt, loader = _loader_parts(kind, own_generator)
    straight = []
    with stint.Resumable(str(tmp_path / "straight"), model=model, optimizer=opt, loader=loader,
                         save_every=0, watch_signals=False) as run:
        assert _train_through(run, model, opt, run.resume(), total, straight) == total
    expected = [v.clone() for v in model.state_dict().values()]

    torch.manual_seed(1)
    model, opt, loader = _loader_parts(kind, own_generator)
    seen = []
    with stint.Resumable(str(tmp_path / "ckpt"), model=model, optimizer=opt, loader=loader,
                         save_every=0) as run:
        assert _train_through(run, model, opt, run.resume(), total, seen, notice_at=13) == 13

    torch.manual_seed(99)  # a new process: other global RNG states, a new model and loader
    model, opt, loader = _loader_parts(kind, own_generator)
    with stint.Resumable(str(tmp_path / "ckpt"), model=model, optimizer=opt, loader=loader,
                         save_every=0, watch_signals=False) as run:
        step = run.resume()
        assert step == 13
        assert _train_through(run, model, opt, step, total, seen) == total
    assert seen == straight
    for got, want in zip(model.state_dict().values(), expected):
        assert same_bits(got, want)


def test_steps_beyond_64_bits_are_refused_by_resumable(root):
    parts = _setup()
    with _resumable(root, parts, watch_signals=False) as run:
        for call in (run.save, run.step_boundary, run.finish):
            with pytest.raises(ValueError, match=r"step 18446744073709551616 is out of range"):
                call(2**64)


def test_a_finished_run_exits_0_at_its_next_start_until_cleared(root):
    """finish() marks the root COMPLETE: a later start of the same run (a
    requeue racing the end, a resubmission) exits 0 in resume(), without
    training; the marker records who finished it."""
    parts = _setup()
    with _resumable(root, parts, save_every=0, watch_signals=False) as run:
        assert run.resume() == 0
        for step in (1, 2, 3):
            _step(*parts)
            run.step_boundary(step)
        run.finish(3)
    reader = stint.Checkpointer(root, read_only=True)
    step, info = reader.completion()
    reader.close()
    assert step == 3 and info["launcher"] == "none" and info["world_size"] == 1

    with _resumable(root, _setup(), watch_signals=False) as run:
        with pytest.raises(SystemExit) as exited:
            run.resume()
        assert exited.value.code == 0
    with _resumable(root, _setup(), watch_signals=False, exit_if_complete=False) as run:
        assert run.resume() == 3  # on purpose: the final step
        run.checkpointer.clear_completion()
    with _resumable(root, _setup(), watch_signals=False) as run:
        assert run.resume() == 3
        assert run.checkpointer.completion() is None
