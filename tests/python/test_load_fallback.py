"""What load and resume pass over, and what they leave alone: a checkpoint
written in a newer format version is skipped with a reason and never
quarantined or deleted; a step that is not there is NotFoundError; a key
named like another rank's blob loads."""

import json
import os

import pytest
import torch

import stint


def _files(directory):
    """{name: bytes} of every file in a checkpoint directory."""
    out = {}
    for name in sorted(os.listdir(directory)):
        with open(os.path.join(directory, name), "rb") as f:
            out[name] = f.read()
    return out


def _make_newer_format(step_dir):
    """Rewrites a committed MANIFEST as a newer stint would write it."""
    path = os.path.join(step_dir, "MANIFEST.json")
    with open(path) as f:
        doc = json.load(f)
    doc["manifest"]["version"] = [doc["manifest"]["version"][0] + 1, 0]
    with open(path, "w") as f:
        json.dump(doc, f)


def test_resume_passes_over_a_newer_format_and_leaves_it_untouched(root):
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with stint.Resumable(root, model=model, optimizer=opt, watch_signals=False, save_every=2,
                         keep_last=0) as run:
        assert run.resume() == 0
        for step in (1, 2, 3, 4):
            model(torch.ones(1, 4)).sum().backward()
            opt.step()
            run.step_boundary(step)
        run.finish(4)
    at4 = os.path.join(root, "step-00000004")
    _make_newer_format(at4)
    before = _files(at4)

    # An older binary resumes beside a newer one's checkpoint, with retention on.
    with stint.Resumable(root, model=model, optimizer=opt, watch_signals=False, save_every=0,
                         keep_last=1, exit_if_complete=False) as run:
        assert run.resume() == 2
        assert len(run.resume_skipped) == 1, run.resume_skipped
        assert "step-00000004" in run.resume_skipped[0]
        assert "unknown checkpoint format version 2.0" in run.resume_skipped[0]
        run.finish(3)  # retention is due for step 2; it cannot tell what step 4 references
        assert 4 in run.checkpointer.list_committed()
    assert not [n for n in os.listdir(root) if n.startswith("quarantine-")]
    assert _files(at4) == before


def test_load_of_a_step_that_is_not_there_raises_not_found(root):
    c = stint.Checkpointer(root)
    c.save(1, {"w": torch.ones(3)}).durable.result()
    with pytest.raises(stint.NotFoundError, match="step-00000007"):
        c.load(step=7)
    c.close()


def test_a_key_named_like_another_ranks_blob_loads(root):
    c = stint.Checkpointer(root)
    c.save(1, {"rank-00001/x": b"user bytes", "w": torch.ones(3)}).durable.result()
    state = c.load()
    assert state["rank-00001/x"] == b"user bytes"
    assert torch.equal(state["w"], torch.ones(3))
    c.close()
