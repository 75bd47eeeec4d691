"""Incremental checkpoints and compress="auto" through the Python API: a
LoRA-style state whose frozen base is referenced, not rewritten; every step
loads back bit for bit; frozen= is checked."""

import copy
import os

import pytest
import torch

import stint
from util import assert_same_tree


def _lora_state(seed=0):
    g = torch.Generator().manual_seed(seed)
    base = torch.nn.Linear(256, 256)  # frozen: 256 KiB of weights
    base.requires_grad_(False)
    lora_a = torch.nn.Parameter(torch.randn(256, 4, generator=g))
    lora_b = torch.nn.Parameter(torch.zeros(4, 256))
    opt = torch.optim.AdamW([lora_a, lora_b], lr=0.01)
    return base, (lora_a, lora_b), opt


def _train(base, lora, opt, step):
    g = torch.Generator().manual_seed(step)
    x = torch.randn(8, 256, generator=g)
    loss = (base(x) + x @ lora[0] @ lora[1]).square().mean()
    loss.backward()
    opt.step()
    opt.zero_grad()


def _state(base, lora, opt, step):
    return {"model": {"base": base.state_dict(), "lora_a": lora[0].detach(),
                      "lora_b": lora[1].detach()},
            "optim": opt.state_dict(), "step": step}


def _snapshot(state):
    return copy.deepcopy(state)


def test_frozen_base_is_referenced_and_every_step_loads_bit_exactly(tmp_path):
    base, lora, opt = _lora_state()
    frozen = lambda name, t: name.startswith("model.base.")
    saved = {}
    with stint.Checkpointer(tmp_path / "ck", incremental=True, chunk_size=64 << 10,
                            keep_last=2) as ck:
        for step in range(1, 5):
            _train(base, lora, opt, step)
            state = _state(base, lora, opt, step)
            saved[step] = _snapshot(state)
            ck.save(step, state, frozen=frozen).durable.result(timeout=60)
            last = ck.stats()["last"]
            if step == 1:
                assert last["referenced_bytes"] == 0
            else:
                base_bytes = sum(t.nbytes for t in base.state_dict().values())
                assert last["referenced_bytes"] >= base_bytes, last
                assert last["stored_bytes"] < base_bytes, last
        # keep_last=2 keeps 3 and 4, and 1: both reference its base (and 2
        # only if a chunk unchanged since then is referenced there).
        ck.flush()  # retention runs after a save is durable
        kept = ck.list_committed()
        assert [s for s in kept if s != 2] == [1, 3, 4], kept
        for step in kept:
            got = ck.load(step=step, verify=True)
            assert_same_tree(got, saved[step])
        # Into live objects, as a resume does.
        fresh_base, fresh_lora, fresh_opt = _lora_state(seed=9)
        into = _state(fresh_base, fresh_lora, fresh_opt, 0)
        ck.load(into=into)
        fresh_opt.load_state_dict(into["optim"])
        assert torch.equal(fresh_base.weight, base.weight)
        assert torch.equal(fresh_lora[0], lora[0])


def test_unflagged_tensors_are_hashed_and_unchanged_chunks_skipped(tmp_path):
    x = torch.arange(1 << 16, dtype=torch.float32)  # 256 KiB: four 64 KiB chunks
    with stint.Checkpointer(tmp_path / "ck", incremental=True, chunk_size=64 << 10) as ck:
        ck.save(1, {"x": x}).durable.result(timeout=60)
        x[5] = -1.0  # one chunk changes
        ck.save(2, {"x": x}).durable.result(timeout=60)
        last = ck.stats()["last"]
        assert last["referenced_bytes"] == 3 * (64 << 10), last
        assert torch.equal(ck.load(step=2)["x"], x)
        assert ck.load(step=1)["x"][5].item() == 5.0


def test_a_base_unchanged_last_time_is_matched_in_place_and_changes_still_saved(tmp_path):
    """Without frozen=: from the third save on, a tensor the previous save
    found unchanged is hashed in its own memory, not copied; a chunk of it
    that did change is found and written."""
    base = torch.arange(1 << 16, dtype=torch.float32)  # four 64 KiB chunks
    with stint.Checkpointer(tmp_path / "ck", incremental=True, chunk_size=64 << 10) as ck:
        for step in (1, 2, 3):
            ck.save(step, {"base": base, "step": step}).durable.result(timeout=60)
        last = ck.stats()["last"]
        assert last["matched_in_place_bytes"] == base.nbytes, last
        base[(1 << 14) + 3] = -1.0  # the second chunk changes
        ck.save(4, {"base": base, "step": 4}).durable.result(timeout=60)
        last = ck.stats()["last"]
        assert last["matched_in_place_bytes"] == 3 * (64 << 10), last
        assert last["stored_bytes"] >= 64 << 10, last
        assert torch.equal(ck.load(step=4)["base"], base)
        assert ck.load(step=3)["base"][(1 << 14) + 3].item() == float((1 << 14) + 3)


def test_frozen_names_must_exist(tmp_path):
    with stint.Checkpointer(tmp_path / "ck", incremental=True) as ck:
        with pytest.raises(stint.NotFoundError, match="model.nope"):
            ck.save(1, {"model": {"w": torch.ones(3)}}, frozen=["model.nope"])
        with pytest.raises(TypeError):
            ck.save(1, {"model": {"w": torch.ones(3)}}, frozen="model.w")


def test_deleted_referenced_checkpoint_is_reported_not_loaded(tmp_path):
    root = tmp_path / "ck"
    with stint.Checkpointer(root, incremental=True) as ck:
        ck.save(1, {"w": torch.ones(1000)}).durable.result(timeout=60)
        ck.save(2, {"w": torch.ones(1000), "n": torch.zeros(3)}).durable.result(timeout=60)
    os.remove(root / "step-00000001" / "rank-00000.stint")
    with stint.Checkpointer(root, incremental=True) as ck:
        with pytest.raises(stint.DataLossError, match="step-00000001/rank-00000.stint"):
            ck.load(step=2)


def test_compress_auto_reports_its_choice_and_loads_back(tmp_path):
    x = (torch.randn(1 << 20) * 0.02).bfloat16().float()  # 4 MiB, zstd shrinks it
    with stint.Checkpointer(tmp_path / "ck", compress="auto", chunk_size=1 << 20) as ck:
        ck.save(1, {"x": x}).durable.result(timeout=60)
        first = ck.stats()["last"]
        assert not first["compressed"]
        assert "not measured" in first["compress_decision"], first
        ck.save(2, {"x": x}).durable.result(timeout=60)
        second = ck.stats()["last"]
        # Decided on the figures: rate, ratio and the disk's measured write rate.
        assert "ratio" in second["compress_decision"], second
        assert second["compressed"] == second["compress_decision"].startswith("zstd"), second
        assert torch.equal(ck.load()["x"], x)
    with pytest.raises(stint.InvalidArgumentError):
        stint.Checkpointer(tmp_path / "bad", compress="zstd")
