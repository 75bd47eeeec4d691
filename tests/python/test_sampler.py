"""stint.ResumableSampler as a DataLoader batch sampler: every sample
trained on exactly once per epoch across stops, resumes, worker processes
and ranks."""

import collections

import pytest
import torch
from torch.utils.data import DataLoader, Dataset, get_worker_info

import stint


class IndexDataset(Dataset):
    """Returns (index, id of the worker process that fetched it)."""

    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        info = get_worker_info()
        return torch.tensor([i, -1 if info is None else info.id])


def _loader(sampler, n, workers):
    return DataLoader(IndexDataset(n), batch_sampler=sampler, num_workers=workers,
                      generator=torch.Generator().manual_seed(0),
                      prefetch_factor=4 if workers else None)


def _train(sampler, n, workers, steps, trained, fetched_by):
    """Runs `steps` steps (across epochs); records what each committed step trained on."""
    done = 0
    while done < steps:
        for batch in _loader(sampler, n, workers):
            trained.append((sampler.epoch, batch[:, 0].tolist()))
            for _, w in batch.tolist():
                fetched_by[w] += 1
            sampler.commit_step()
            done += 1
            if done == steps:
                break  # a stop mid-epoch: the loader has prefetched batches never trained on
    return done


@pytest.mark.parametrize("workers", [0, 2])
def test_exactly_once_across_stops_and_resumes_with_workers(workers):
    n, batch = 103, 8  # 13 steps per epoch, the last one partial
    sampler = stint.ResumableSampler(n, batch, seed=5, rank=0, world_size=1)
    assert sampler.steps_per_epoch == 13 and len(sampler) == 13
    trained, fetched_by = [], collections.Counter()
    stops = [4, 7, 9, 6]  # 26 steps = two epochs, stopping mid-epoch each time
    for steps in stops:
        _train(sampler, n, workers, steps, trained, fetched_by)
        state = sampler.state_dict()
        sampler = stint.ResumableSampler(n, batch, seed=5, rank=0, world_size=1)  # a new process
        sampler.load_state_dict(state)
    assert sampler.cursor == (2, 0)
    per_epoch = collections.defaultdict(list)
    for epoch, ids in trained:
        per_epoch[epoch].extend(ids)
    assert sorted(per_epoch) == [0, 1]
    for epoch, ids in per_epoch.items():
        assert sorted(ids) == list(range(n)), "epoch %d" % epoch
    assert per_epoch[0] != per_epoch[1]  # a new order each epoch
    if workers:
        assert -1 not in fetched_by and len(fetched_by) > 1  # fetched in worker processes
    else:
        assert set(fetched_by) == {-1}


def test_each_batch_is_fetched_once_by_the_workers():
    """The workers get whole batches from the main process: nothing is fetched twice."""
    n = 64
    sampler = stint.ResumableSampler(n, 8, seed=1, rank=0, world_size=1)
    seen = collections.Counter()
    for batch in _loader(sampler, n, 2):
        seen.update(batch[:, 0].tolist())
        sampler.commit_step()
    assert sorted(seen) == list(range(n)) and set(seen.values()) == {1}


def test_uncommitted_batches_come_again():
    sampler = stint.ResumableSampler(40, 4, seed=2, rank=0, world_size=1)
    it = iter(sampler)
    first, second = next(it), next(it)
    sampler.commit_step()  # only the first was trained on
    assert next(iter(sampler)) == second
    assert sampler.indices_at_step(0) == first


def test_ranks_partition_every_global_batch():
    n, batch, world = 50, 12, 3
    samplers = [stint.ResumableSampler(n, batch, seed=9, rank=r, world_size=world) for r in range(world)]
    seen = []
    for rank_batches in zip(*[list(s) for s in samplers]):
        union = [i for b in rank_batches for i in b]
        assert len(union) == len(set(union))
        seen.extend(union)
        for s in samplers:
            s.commit_step()
    assert sorted(seen) == list(range(n))
    # the tail (50 = 4 * 12 + 2) is split as evenly as possible: 1, 1, 0
    assert [len(s.indices_at_step(4)) for s in samplers] == [1, 1, 0]


def test_resume_on_a_different_world_size():
    n, batch = 48, 8
    one = stint.ResumableSampler(n, batch, seed=3, rank=0, world_size=1)
    seen = []
    for ids in list(one)[:2]:
        seen.extend(ids)
        one.commit_step()
    state = one.state_dict()
    two = [stint.ResumableSampler(n, batch, seed=3, rank=r, world_size=2) for r in range(2)]
    for s in two:
        s.load_state_dict(state)
    for rank_batches in zip(*[list(s) for s in two]):
        seen.extend(i for b in rank_batches for i in b)
    assert sorted(seen) == list(range(n))


def test_changed_data_configuration_refuses_to_resume():
    a = stint.ResumableSampler(100, 10, seed=1, rank=0, world_size=1)
    a.commit_step()
    b = stint.ResumableSampler(100, 10, seed=2, rank=0, world_size=1)
    with pytest.raises(stint.FailedPreconditionError, match="seed"):
        b.load_state_dict(a.state_dict())
    with pytest.raises(stint.DataLossError):
        b.load_state_dict({"stint_sampler": "{not json"})
    assert b.cursor == (0, 0)


def test_sampler_argument_errors():
    with pytest.raises(stint.InvalidArgumentError):
        stint.ResumableSampler(0, 4)
    with pytest.raises(stint.InvalidArgumentError, match="not divisible by world_size 3"):
        stint.ResumableSampler(10, 4, rank=0, world_size=3)
    with pytest.raises(stint.InvalidArgumentError, match="rank 2 is not in a world of 2"):
        stint.ResumableSampler(10, 4, rank=2, world_size=2)


def test_drop_last_and_no_shuffle():
    s = stint.ResumableSampler(10, 4, shuffle=False, drop_last=True, rank=0, world_size=1)
    assert list(s) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert s.epoch_length == 8


def test_sampler_state_round_trips_through_a_checkpoint(root):
    s = stint.ResumableSampler(30, 5, seed=4, rank=0, world_size=1)
    for _ in range(3):
        s.commit_step()
    with stint.Checkpointer(root) as ckpt:
        ckpt.save(3, {"sampler": s.state_dict()}).durable.result()
        t = stint.ResumableSampler(30, 5, seed=4, rank=0, world_size=1)
        t.load_state_dict(ckpt.load()["sampler"])
    assert t.cursor == s.cursor == (0, 15) and list(t) == list(s)


def test_index_permutation_is_a_bijection():
    p = stint.IndexPermutation(1000, 42)
    assert sorted(p(i) for i in range(1000)) == list(range(1000))
    with pytest.raises(stint.InvalidArgumentError):
        p(1000)
