"""stint.Resumable in one process: periodic saves, preemption at a step
boundary, resume of every registered piece, damaged checkpoints."""

import os
import random

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
            run.watcher.notify("test", 60)
        if run.step_boundary(step):
            break
    assert step == 6 and run.exit_code == stint.EXIT_REQUEUE
    assert plans and plans[0].save and run.last_durable_step == 6
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
    with _resumable(root, _setup(), watch_signals=False) as run:
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
    with stint.Resumable(root, model=bigger, watch_signals=False) as run:
        with pytest.raises(stint.InvalidArgumentError, match="has shape"):
            run.resume()
    with stint.Resumable(root, model=model, optimizer=opt, objects={"other": sched},
                         watch_signals=False) as run:
        with pytest.raises(stint.FailedPreconditionError, match="no state for object 'other'"):
            run.resume()
    changed = stint.ResumableSampler(41, 4, seed=1, rank=0, world_size=1)
    with stint.Resumable(root, model=model, optimizer=opt, sampler=changed, watch_signals=False) as run:
        with pytest.raises(stint.FailedPreconditionError, match="dataset_size|size"):
            run.resume()
