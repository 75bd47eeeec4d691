"""stint.ResumableSampler: the runtime's resumable data order as a
torch.utils.data batch sampler.

    sampler = stint.ResumableSampler(len(dataset), global_batch=64, seed=0)
    loader = DataLoader(dataset, batch_sampler=sampler, num_workers=4)
    for batch in loader:            # this rank's batches, from the committed step on
        ...train...
        sampler.commit_step()       # after optimizer.step() (Resumable.step_boundary does it)

Every step's global batch is a pure function of one cursor (epoch, consumed)
over a stateless permutation; rank r of W takes the r-th slice. The cursor
moves only in commit_step(), never when the DataLoader prefetches, so a
checkpoint of state_dict() resumes at the first step not trained on, with
every sample trained on exactly once per epoch, on any number of ranks that
divides the global batch.

Iterating yields this rank's index list for each step from the committed
one to the end of that epoch; a new iteration (the next `for` over the
loader) continues where the committed cursor is, which is the next epoch
once the last step of this one is committed. The indices are made in the
main process, so with num_workers > 0 the workers only fetch: each batch
is fetched by one worker, once per iteration.

With world_size > 1 and drop_last=False the epoch's last global batch is
split as evenly as possible, so a rank may get a shorter (even empty) last
batch; every rank still commits that step.
"""

from __future__ import annotations

from typing import Any, Dict, Iterator, List, Optional, Tuple, Union

from torch.utils.data import Sampler

from . import _C
from .checkpointer import _check_step


class ResumableSampler(Sampler[List[int]]):
    def __init__(self, dataset_size: int, global_batch: int, *, seed: int = 0, shuffle: bool = True,
                 drop_last: bool = False, rank: Optional[int] = None,
                 world_size: Optional[int] = None) -> None:
        """rank and world_size default to the launcher's (torchrun, Slurm; else 0 of 1).
        InvalidArgumentError for an empty dataset, a zero batch, a world size
        that does not divide the global batch, or a rank outside the world."""
        self._c = _C.ResumableSampler(int(dataset_size), int(global_batch), int(seed), bool(shuffle),
                                      bool(drop_last))
        if rank is None or world_size is None:
            env = _C.launch_env()
            rank = env["rank"] if rank is None else rank
            world_size = env["world_size"] if world_size is None else world_size
        if world_size < 1 or not 0 <= rank < world_size:
            raise _C.InvalidArgumentError("rank %d is not in a world of %d" % (rank, world_size))
        if global_batch % world_size != 0:
            raise _C.InvalidArgumentError("global_batch %d is not divisible by world_size %d"
                                          % (global_batch, world_size))
        self.rank = rank
        self.world_size = world_size

    # -- torch.utils.data.Sampler ---------------------------------------------

    def __iter__(self) -> Iterator[List[int]]:
        c = self._c
        step = c.committed_steps
        epoch = c.cursor_at_step(step)[0]
        while True:
            # Commits may overtake this iterator (a loop that commits without
            # drawing from it): never hand out a committed step.
            step = max(step, c.committed_steps)
            if c.cursor_at_step(step)[0] != epoch:
                return
            yield c.rank_indices_at_step(step, self.rank, self.world_size)
            step += 1

    def __len__(self) -> int:
        """Batches the next iteration yields: from the committed step to the end of its epoch."""
        c = self._c
        return c.steps_per_epoch - c.committed_steps % c.steps_per_epoch

    # -- the cursor -------------------------------------------------------------

    def commit_step(self) -> None:
        """Marks the batch at the cursor as trained on: call after the optimizer step."""
        self._c.commit_step()

    @property
    def cursor(self) -> Tuple[int, int]:
        """(epoch, consumed): the committed position."""
        return self._c.cursor

    @property
    def epoch(self) -> int:
        return self._c.cursor[0]

    @property
    def committed_steps(self) -> int:
        """Global number of the first step not committed (steps count across epochs)."""
        return self._c.committed_steps

    @property
    def steps_per_epoch(self) -> int:
        return self._c.steps_per_epoch

    @property
    def epoch_length(self) -> int:
        return self._c.epoch_length

    def indices_at_step(self, step: int, rank: Optional[int] = None,
                        world_size: Optional[int] = None) -> List[int]:
        """Indices of `rank` (default: this one) for global step `step`."""
        return self._c.rank_indices_at_step(_check_step(step), self.rank if rank is None else rank,
                                            self.world_size if world_size is None else world_size)

    def worker_indices(self, worker: int, num_workers: int) -> List[int]:
        """The part of this rank's batch at the cursor that DataLoader worker `worker` loads."""
        return self._c.worker_indices(self.rank, self.world_size, worker, num_workers)

    def fingerprint(self) -> str:
        """'size=... seed=... global_batch=... shuffle=... drop_last=... order=feistel-v1'."""
        return self._c.fingerprint()

    # -- checkpointing ----------------------------------------------------------

    def state_dict(self) -> Dict[str, str]:
        """{'stint_sampler': <versioned JSON>}: the cursor and the data fingerprint."""
        return {"stint_sampler": self._c.save_state()}

    def load_state_dict(self, state: Union[Dict[str, Any], str, bytes]) -> None:
        """Restores the cursor. FailedPreconditionError naming the field when
        the saved data configuration (size, seed, global batch, shuffle,
        order version) differs from this sampler's; DataLossError for a
        damaged state."""
        if isinstance(state, dict) and "stint_sampler" in state:
            state = state["stint_sampler"]
        if isinstance(state, bytes):
            state = state.decode("utf-8")
        if not isinstance(state, str):
            raise _C.InvalidArgumentError("not a ResumableSampler state_dict()")
        self._c.load_state(state)

    def __repr__(self) -> str:
        return "<stint.ResumableSampler %s rank %d/%d cursor %s>" % (
            self._c.fingerprint(), self.rank, self.world_size, self._c.cursor)
