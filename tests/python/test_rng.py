"""RNG capture and restore: torch, Python random, numpy, through a checkpoint."""

import random

import numpy as np
import pytest
import torch

import stint


def _draws():
    return (torch.rand(3).tolist(), torch.randn(2).tolist(), random.random(), random.gauss(0, 1),
            np.random.rand(2).tolist(), np.random.randn())


def test_rng_round_trips_through_a_checkpoint(root):
    torch.manual_seed(1)
    random.seed(2)
    np.random.seed(3)
    _draws()
    torch.randn(1)  # leaves a cached normal in numpy/python gauss state too
    np.random.randn()
    state = stint.capture_rng()
    assert set(state) == {"torch", "python", "numpy"} and "cpu" in state["torch"]
    expected = _draws()
    with stint.Checkpointer(root) as ckpt:
        ckpt.save(1, {"rng": state}).durable.result()
        loaded = ckpt.load()["rng"]
    torch.manual_seed(99)
    random.seed(99)
    np.random.seed(99)
    stint.restore_rng(loaded)
    assert _draws() == expected


def test_torch_rng_bytes_match_torch_get_rng_state():
    torch.manual_seed(5)
    assert stint.capture_rng()["torch"]["cpu"] == bytes(torch.get_rng_state().numpy())


def test_bad_rng_state():
    with pytest.raises(stint.InvalidArgumentError):
        stint.restore_rng({"torch": {"cpu": b"short"}, "python": random.getstate()})
    with pytest.raises(stint.InvalidArgumentError, match="no 'cpu' generator"):
        stint.restore_rng({"torch": {}, "python": random.getstate()})
    with pytest.raises(stint.InvalidArgumentError):
        stint.restore_rng({"torch": {"cpu": stint.capture_rng()["torch"]["cpu"], "cuda:7": b""},
                           "python": random.getstate()})
    with pytest.raises(stint.InvalidArgumentError, match="not an RNG state"):
        stint.restore_rng([1, 2])
