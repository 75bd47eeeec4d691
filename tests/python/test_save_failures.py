"""Saves that must not break the saves after them: a state that grows after
the first save (the optimizer's state appears at the first step), a failed
background save, the same step saved twice while the first is in flight."""

import os
import shutil

import pytest
import torch

import stint


def _train_step(model, opt):
    loss = model(torch.randn(8, model.in_features)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()


def _state(model, opt):
    return {"model": model.state_dict(), "optim": opt.state_dict()}


def test_checkpointer_saves_before_optimizer_state_then_after(root):
    torch.manual_seed(0)
    model = torch.nn.Linear(256, 256)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    with stint.Checkpointer(root) as ckpt:
        # Step 0: AdamW has no state yet, so this snapshot is a third of the later ones.
        ckpt.save(0, _state(model, opt)).durable.result(timeout=120)
        for step in range(1, 4):
            _train_step(model, opt)
            ckpt.save(step, _state(model, opt)).durable.result(timeout=120)
        ckpt.flush()
        loaded = ckpt.load()
    want = opt.state_dict()["state"][0]["exp_avg_sq"]
    assert torch.equal(loaded["optim"]["state"][0]["exp_avg_sq"], want)
    assert torch.equal(loaded["model"]["weight"], model.weight.detach())


def test_resumable_saves_before_optimizer_state_then_trains_on(root):
    torch.manual_seed(0)
    model = torch.nn.Linear(256, 256)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    run = stint.Resumable(root, model=model, optimizer=opt, save_every=1, watch_signals=False)
    try:
        assert run.resume() == 0
        run.save(0, wait=True)
        for step in range(1, 5):
            _train_step(model, opt)
            assert not run.step_boundary(step)
        run.finish(4)
        assert run.last_durable_step == 4
        assert run.checkpointer.list_committed() == [2, 3, 4]
    finally:
        run.close()


def test_staging_cap_is_named_when_a_save_exceeds_it(root):
    with stint.Checkpointer(root, staging_max_bytes=64 << 10) as ckpt:
        with pytest.raises(stint.ResourceExhaustedError, match="staging_max_bytes"):
            ckpt.save(1, {"w": torch.zeros(1 << 16)})
        ckpt.save(2, {"w": torch.zeros(16)}).durable.result(timeout=120)  # what fits saves


def test_a_failure_raised_by_its_future_is_not_raised_again(root):
    ckpt = stint.Checkpointer(root)
    shutil.rmtree(root)  # the persist thread cannot create its .tmp- directory
    h = ckpt.save(1, {"w": torch.zeros(16)})
    with pytest.raises(stint.NotFoundError):
        h.durable.result(timeout=120)
    os.makedirs(root)  # the path is back
    h2 = ckpt.save(2, {"w": torch.ones(16)})  # not refused for step 1's failure
    assert h2.durable.result(timeout=120) == 2
    ckpt.flush()  # step 1's failure was handed out by its future already
    assert ckpt.list_committed() == [2]
    ckpt.close()


def test_a_failure_nobody_asked_about_is_raised_by_flush_once(root):
    ckpt = stint.Checkpointer(root)
    shutil.rmtree(root)
    ckpt.save(1, {"w": torch.zeros(16)})
    ckpt.save(2, {"w": torch.zeros(16)})  # fails too, and is not refused for step 1
    with pytest.raises(stint.NotFoundError, match="background save of step 1"):
        ckpt.flush()
    ckpt.flush()  # reported once
    os.makedirs(root)
    assert ckpt.save(3, {"w": torch.ones(16)}).durable.result(timeout=120) == 3
    ckpt.flush()
    ckpt.close()


def test_same_step_twice_while_in_flight_is_refused_at_once(root):
    big = {"w": torch.randn(16 << 20)}  # 64 MiB: persisting it outlasts the next call
    with stint.Checkpointer(root) as ckpt:
        first = ckpt.save(5, big)
        with pytest.raises(stint.AlreadyExistsError):
            ckpt.save(5, {"w": torch.zeros(16)})
        assert first.durable.result(timeout=120) == 5
        assert ckpt.save(6, {"w": torch.ones(16)}).durable.result(timeout=120) == 6
        ckpt.flush()
        assert ckpt.list_committed() == [5, 6]
        assert torch.equal(ckpt.load(step=5)["w"], big["w"])
