"""Lazy snapshots from a PyTorch training loop on the CPU: attach() hooks
(forward pre-hook, optimizer step pre-hook), before_write(), wait_staged(),
snapshot="eager"|"lazy"|"auto", and checkpoints that hold exactly the state
of their step while training runs on. The GPU form of the same path is in
test_cuda.py."""

import pytest
import torch

import stint
from util import assert_same_tree, same_bits


def _model():
    torch.manual_seed(0)
    # Large enough (~24 MiB of parameters) that a copy is still running when
    # save() returns; BatchNorm's running statistics change in the forward.
    return torch.nn.Sequential(torch.nn.Linear(512, 4096), torch.nn.BatchNorm1d(4096),
                               torch.nn.ReLU(), torch.nn.Linear(4096, 512))


def _snapshot(model, opt):
    return {"model": _clone(model.state_dict()), "optim": _clone(opt.state_dict())}


def _clone(x):
    if isinstance(x, torch.Tensor):
        return x.clone()
    if isinstance(x, dict):
        return type(x)((k, _clone(v)) for k, v in x.items())
    if isinstance(x, list):
        return [_clone(v) for v in x]
    return x


def _train(model, opt, steps, ckpt=None, save_every=1, on_save=None):
    """A loop that saves every `save_every` steps and returns the state
    copied at each save."""
    g = torch.Generator().manual_seed(1)
    expected = {}
    for step in range(1, steps + 1):
        x = torch.randn(64, 512, generator=g)
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if ckpt is not None and step % save_every == 0:
            expected[step] = _snapshot(model, opt)
            handle = ckpt.save(step, {"model": model.state_dict(), "optim": opt.state_dict()})
            if on_save is not None:
                on_save(handle)
    return expected


def test_attach_makes_snapshots_lazy_and_every_checkpoint_holds_its_step(root):
    model = _model()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    with stint.Checkpointer(root, keep_last=0) as ckpt:
        assert not ckpt.lazy
        ckpt.attach(model, opt)
        assert ckpt.lazy
        handles = []
        expected = _train(model, opt, 6, ckpt, save_every=2, on_save=handles.append)
        for h in handles:
            h.durable.result(timeout=120)
        for step, state in expected.items():
            back = ckpt.load(step=step)
            assert_same_tree(state["model"], back["model"], "step %d model" % step)
            assert_same_tree(state["optim"], back["optim"], "step %d optim" % step)


def test_optimizer_hook_waits_until_the_copies_are_done(root):
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    with stint.Checkpointer(root) as ckpt:
        ckpt.attach(model, opt)
        seen = []
        saved = []
        # Registered after attach(): runs after stint's hook, right before
        # the optimizer writes the parameters.
        opt.register_step_pre_hook(
            lambda o, a, k: seen.append(all(h.staged.done() for h in saved)))
        forward_seen = []
        model.register_forward_pre_hook(
            lambda m, a: forward_seen.append(all(h.staged.done() for h in saved)))
        _train(model, opt, 4, ckpt, save_every=1, on_save=saved.append)
        ckpt.flush()
    assert seen and all(seen), seen
    assert forward_seen


def test_lazy_checkpoint_is_bit_identical_to_an_eager_one(tmp_path):
    results = {}
    for mode in ("eager", "lazy"):
        model = _model()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        with stint.Checkpointer(tmp_path / mode, snapshot=mode) as ckpt:
            if mode == "lazy":
                ckpt.attach(model, opt)
            _train(model, opt, 5, ckpt, save_every=5)
            ckpt.flush()
            results[mode] = ckpt.load(step=5)
    assert_same_tree(results["eager"], results["lazy"])


def test_explicit_barriers_without_hooks(root):
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with stint.Checkpointer(root, snapshot="lazy") as ckpt:
        assert ckpt.lazy
        expected = _snapshot(model, opt)
        staged, durable = ckpt.save(1, {"model": model.state_dict(), "optim": opt.state_dict()})
        ckpt.before_write("forward")
        loss = model(torch.randn(8, 512)).sum()
        loss.backward()
        ckpt.before_write("optimizer_step")
        assert staged.done()
        opt.step()
        durable.result(timeout=60)
        back = ckpt.load(step=1)
    assert_same_tree(expected["model"], back["model"])
    with pytest.raises(stint.InvalidArgumentError, match="forward"):
        stint.Checkpointer(root, snapshot="lazy").before_write("backward")


def test_auto_without_hooks_is_eager_and_wait_staged_is_free(root):
    t = torch.arange(1 << 20, dtype=torch.float32)
    with stint.Checkpointer(root) as ckpt:
        staged, durable = ckpt.save(1, {"t": t})
        assert staged.done()  # eager: the copy is done when save() returns
        t.add_(1)
        ckpt.wait_staged(timeout=0)
        durable.result(timeout=60)
        assert same_bits(ckpt.load()["t"], torch.arange(1 << 20, dtype=torch.float32))


def test_detach_removes_the_hooks_and_returns_to_eager(root):
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with stint.Checkpointer(root) as ckpt:
        ckpt.attach(model, opt)
        assert len(model._forward_pre_hooks) == 1
        ckpt.detach()
        assert not ckpt.lazy
        assert len(model._forward_pre_hooks) == 0
        staged, _ = ckpt.save(1, {"model": model.state_dict()})
        assert staged.done()


class _SaveSpy:
    """Stands in for the binding object and records what save() marks."""

    def __init__(self, inner):
        self.inner = inner
        self.calls = []

    def save(self, step, names, tensors, blobs, boxes, forward, frozen):
        self.calls.append(dict(zip(names, forward or [])))
        return self.inner.save(step, names, tensors, blobs, boxes, forward, frozen)

    def __getattr__(self, name):
        return getattr(self.inner, name)


def test_batchnorm_buffers_are_marked_as_written_by_the_forward(root):
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with stint.Checkpointer(root) as ckpt:
        spy = ckpt._c = _SaveSpy(ckpt._c)
        calls = spy.calls
        ckpt.attach(model, opt)
        ckpt.save(1, {"model": model.state_dict(), "optim": opt.state_dict()})
        ckpt.flush()
    marked = {n for n, f in calls[0].items() if f}
    assert any("running_mean" in n for n in marked), marked
    assert any("num_batches_tracked" in n for n in marked), marked
    assert not any("weight" in n for n in marked), marked


def test_invalid_snapshot_mode_is_refused(root):
    with pytest.raises(stint.InvalidArgumentError, match="snapshot"):
        stint.Checkpointer(root, snapshot="later")


def test_map_location_maps_missing_gpus_instead_of_refusing():
    from stint import pytree
    dev = pytree._device_for("cuda:3", None, "w", "here")
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    assert dev == (torch.device("cpu") if count == 0 else torch.device("cuda", 3 % count))
    assert pytree._device_for("cuda:1", {"cuda:1": "cpu"}, "w", "here") == torch.device("cpu")
    assert pytree._device_for("cpu", {"cuda:1": "cuda:0"}, "w", "here") == torch.device("cpu")
    assert pytree._device_for("cuda:0", "cpu", "w", "here") == torch.device("cpu")
