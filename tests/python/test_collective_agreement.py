"""What the ranks of a collective stint.Checkpointer agree on, with real
processes (gloo on CPU, the harness of test_distributed_checkpoint.py): which
plain tensors are per rank, and that a save one rank could not even build
fails on every rank without breaking the next one.

A job is one subprocess per rank running this file as a script
(`python test_collective_agreement.py JOB RANK WORLD DIR`); each rank runs
the parts of its job in order and leaves a marker per part (.ok, or .err with
the traceback).
"""

import os
import sys
import warnings

import pytest

from test_distributed_checkpoint import check_part, main, run_job

HERE = os.path.dirname(os.path.abspath(__file__))

JOBS = {
    "save": ["per_rank_save", "failed_build"],
    "load": {2: ["per_rank_load"], 3: ["per_rank_load"]},
}


@pytest.fixture(scope="module")
def jobs(tmp_path_factory):
    """run(job, world): runs that job once (the save job first); returns the
    shared work directory."""
    import stint
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.dirname(os.path.dirname(stint.__file__)) + os.pathsep + \
        env.get("PYTHONPATH", "")
    env.pop("STINT_GRACE_SECONDS", None)
    work = str(tmp_path_factory.mktemp("agree"))
    done = set()

    def run(job, world):
        for j, w in (("save", 2), (job, world)):
            if (j, w) not in done:
                done.add((j, w))
                run_job(j, w, work, env, script=__file__)
        return work

    return run


def test_per_rank_plain_tensors_load_back_on_their_own_rank(jobs):
    """torch.get_rng_state(), stint.capture_rng() and a counter tensor, each
    different per rank, saved by 2 ranks: every rank loads its own (in place
    and as new tensors), resumes its own random stream, and a replicated
    tensor is still written once."""
    check_part(jobs("load", 2), "per_rank_save", 2)
    check_part(jobs("load", 2), "per_rank_load", 2)


def test_per_rank_plain_tensors_on_more_ranks_than_saved(jobs):
    """Loaded by 3 ranks: ranks 0 and 1 their own, rank 2 rank 0's with a
    warning naming the tensor."""
    check_part(jobs("load", 3), "per_rank_load", 3)


def test_a_save_one_rank_cannot_build_fails_on_every_rank_and_the_next_commits(jobs):
    """Rank 1's state holds an object stint cannot save: save() raises on both
    ranks (rank 0: AbortedError naming rank 1), nothing starts, and the next
    save commits on both."""
    check_part(jobs("save", 2), "failed_build", 2)


# -- the rank side --------------------------------------------------------------------


def _root(work, name):
    return os.path.join(work, name)


def _rank_state(rank):
    import torch
    import stint
    torch.manual_seed(100 + rank)
    return {
        "rng": torch.get_rng_state(),
        "rng_all": stint.capture_rng(),
        "counter": torch.tensor([10 * rank + 1, 7], dtype=torch.int64),
        "shared": torch.arange(6.0),
        "step": 4,
    }


def rank_per_rank_save(rank, world, work):
    import json
    import torch
    import stint
    state = _rank_state(rank)
    with stint.Checkpointer(_root(work, "per-rank"), commit_timeout=60.0) as ck:
        _, durable = ck.save(4, state)
        durable.result(timeout=90)
    with open(os.path.join(_root(work, "per-rank"), "step-00000004", "MANIFEST.json")) as f:
        tensors = {t["name"]: t for t in json.load(f)["manifest"]["tensors"]}
    # Per rank: one row from each rank. Replicated: once, by rank 0.
    assert tensors["counter"]["shape"] == [world, 2], tensors["counter"]
    assert len(tensors["counter"]["shards"]) == world, tensors["counter"]
    assert tensors["rng"]["shape"][0] == world, tensors["rng"]["shape"]
    assert tensors["shared"]["shape"] == [6] and len(tensors["shared"]["shards"]) == 1


def rank_per_rank_load(rank, world, work):
    import torch
    import stint
    from util import same_bits
    own = rank if rank < 2 else 0  # the saving job had 2 ranks
    want = _rank_state(own)
    after_seed = torch.rand(3)  # what rank `own`'s stream gives next
    torch.manual_seed(999)  # something else
    into = {"rng": torch.zeros_like(want["rng"]), "counter": torch.zeros(2, dtype=torch.int64)}
    with stint.Checkpointer(_root(work, "per-rank"), commit_timeout=60.0) as ck:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            back = ck.load(into=into, strict=False)
            fresh = ck.load()
    if rank >= 2:
        assert any("'counter'" in str(w.message) and "rank 0's" in str(w.message) for w in caught), \
            [str(w.message) for w in caught]
    else:
        assert not caught, [str(w.message) for w in caught]
    for got in (back, fresh):
        assert same_bits(got["rng"], want["rng"]), "rank %d: rng is not rank %d's" % (rank, own)
        assert same_bits(got["counter"], want["counter"]), (rank, got["counter"], want["counter"])
        assert same_bits(got["shared"], want["shared"])
        assert got["rng_all"]["torch"] == want["rng_all"]["torch"]
        assert got["step"] == 4
    assert back["counter"] is into["counter"] and back["rng"] is into["rng"]
    # The stream resumes where that rank's left off.
    torch.set_rng_state(back["rng"])
    assert torch.equal(torch.rand(3), after_seed), rank
    stint.restore_rng(fresh["rng_all"])
    assert torch.equal(torch.rand(3), after_seed), rank


def rank_failed_build(rank, world, work):
    import torch
    import stint
    root = _root(work, "failed-build")
    with stint.Checkpointer(root, commit_timeout=60.0) as ck:
        bad = {"w": torch.ones(3), "extra": object() if rank == 1 else 1}
        # save() itself raises on every rank: nobody waits for a deadline.
        if rank == 1:
            with pytest.raises(TypeError, match="extra"):
                ck.save(1, bad)
        else:
            with pytest.raises(stint.AbortedError, match="rank 1"):
                ck.save(1, bad)
        _, durable = ck.save(2, {"w": torch.ones(3), "rank": rank})
        durable.result(timeout=90)
        assert ck.list_committed() == [2], ck.list_committed()
        assert ck.load()["rank"] == rank


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], JOBS, globals())
