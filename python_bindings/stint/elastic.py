"""stint.elastic: data-parallel torch.distributed training whose workers come
and go, grouped by stintd's rendezvous.

    def sync():                                # every rank's state := rank 0's
        ...torch.distributed.broadcast(p, src=0) for the parameters, optimizer state, step...

    with stint.elastic.ElasticWorker() as worker:   # $STINT_COORD_URL, $STINT_COORD_TOKEN, $STINT_JOB_ID
        worker.join(sync=sync)                 # registers, joins, init_process_group("gloo", ...)
        while step < total:
            ids = sampler.indices_at_step(step, worker.rank, worker.world_size)
            ...forward, backward...
            try:
                all_reduce_gradients(model)    # torch.distributed.all_reduce
                optimizer.step(); step += 1
                failed = False
            except RuntimeError:               # a peer died mid-collective: skip the step
                failed = True
            b = worker.step_boundary(stop=watcher.requested, failed=failed, sync=sync)
            if b.stop: ...checkpoint, exit...
        torch.distributed.barrier()
        if worker.rank == 0: worker.finished()

Each generation is a Generation (generation, rank, world_size, master_addr,
master_port, reform_seconds). join() and step_boundary() call
torch.distributed.init_process_group(backend, init_method=gen.init_method,
rank, world_size, timeout) for it, after destroying the group they formed
for the previous one, then call sync() (make this rank's state rank 0's; a
RuntimeError from init or sync, a peer that died meanwhile, re-forms again).
Pass init=False to form the group yourself from the Generation (then use
changed() and reform(), and the rest is yours).

step_boundary() is where membership changes, as in the C++ ElasticGroup:
all ranks agree, with one 2-element all_reduce, on whether stintd's
generation moved (changed(): one atomic load, set by a watcher thread) and on
whether some rank wants to stop; a failed collective (failed=True, or the
agreement itself failing) re-forms too. On a re-form every rank destroys its
process group, joins the next generation (rank 0 is always a survivor when
there is one), forms the new group and calls sync(). A step whose collective
failed must not be committed; which ranks committed it may differ, and the
sync from rank 0 makes them agree again.

Every wait is bounded: join_timeout for finding a group (DeadlineExceededError
naming what was missing), the process group's timeout for collectives.
join() and reform() release the GIL; Ctrl-C raises KeyboardInterrupt out of
them at once, having cancelled the call and closed the rendezvous. Errors are
stint.Error subclasses; a fenced worker (its segment ended) gets AbortedError
"fenced: ...": stop and exit.

Not thread-safe: one training thread drives a worker (close() may come from
another thread).
"""

from __future__ import annotations

import datetime
import time
from typing import Any, Callable, Dict, Literal, NamedTuple, Optional, Tuple

from . import _C
from .checkpointer import _check_step

_DEFAULT_JOIN_TIMEOUT = 300.0
_DEFAULT_PG_TIMEOUT = 60.0


class Generation(NamedTuple):
    """One formed generation of the job's group; reform_seconds is the stall the
    change cost this rank (from the boundary that noticed it to the answer)."""

    generation: int
    rank: int
    world_size: int
    master_addr: str
    master_port: int
    reform_seconds: float

    @property
    def init_method(self) -> str:
        """'tcp://addr:port' for torch.distributed.init_process_group."""
        host = self.master_addr
        if ":" in host and not host.startswith("["):
            host = "[%s]" % host  # IPv6
        return "tcp://%s:%d" % (host, self.master_port)


class Boundary(NamedTuple):
    """What step_boundary() decided, the same on every rank.
    stop: some rank wants to stop (checkpoint, exit); reformed: a new generation
    formed at this boundary (synchronize the state from rank 0); generation: the
    current Generation."""

    stop: bool
    reformed: bool
    generation: Optional[Generation]


Sync = Callable[[], Any]  # makes this rank's state rank 0's (join(), step_boundary())


class ElasticWorker:
    """A worker of a stintd job in its elastic group.

    url, token, job_id, worker_name, request_timeout, retry_deadline, ca_file:
    as for stint._C.CoordinatorSession.start (unset ones come from the
    environment; ca_file from $STINT_CA_FILE);
    or session=: an already started CoordinatorSession (then close() leaves
    it open). advertise_host: the address peers reach this worker at (default
    $STINT_ADVERTISE_HOST, else 127.0.0.1). join_timeout: seconds join() and a
    re-form may wait for a group. backend, pg_timeout: what join() and
    step_boundary() pass to init_process_group (timeout in seconds; it also
    bounds every collective)."""

    def __init__(self, url: Optional[str] = None, token: Optional[str] = None,
                 job_id: Optional[int] = None, *, worker_name: Optional[str] = None,
                 session: Optional[_C.CoordinatorSession] = None,
                 advertise_host: Optional[str] = None,
                 join_timeout: float = _DEFAULT_JOIN_TIMEOUT, backend: str = "gloo",
                 pg_timeout: float = _DEFAULT_PG_TIMEOUT, request_timeout: Optional[float] = None,
                 retry_deadline: Optional[float] = None, ca_file: Optional[str] = None) -> None:
        self._session_args: Dict[str, Any] = dict(
            url=url, token=token, job_id=job_id, worker_name=worker_name,
            request_timeout=request_timeout, retry_deadline=retry_deadline, ca_file=ca_file)
        # Typed Any: None until start() / join(), set for the methods that use them.
        self._session: Any = session  # Optional[_C.CoordinatorSession]
        self._owns_session = session is None
        self._advertise_host = advertise_host
        self._join_timeout = float(join_timeout)
        self._backend = backend
        self._pg_timeout = float(pg_timeout)
        self._rdzv: Any = None  # Optional[_C.ElasticRendezvous]
        self._generation: Any = None  # Optional[Generation]
        self._formed_group = False  # the default process group is ours to destroy
        self._closed = False

    # -- lifecycle --------------------------------------------------------------

    def start(self) -> ElasticWorker:
        """Registers with stintd (unless a session was given) and starts
        watching the job's rendezvous. join() calls it; idempotent. Raises the
        session's errors (UnauthenticatedError for a bad token,
        FailedPreconditionError when the job has no running segment yet)."""
        if self._closed:
            raise _C.FailedPreconditionError("the elastic worker was closed")
        if self._session is None:
            self._session = _C.CoordinatorSession.start(**self._session_args)
        if self._rdzv is None:
            self._rdzv = _C.ElasticRendezvous(self._session, advertise_host=self._advertise_host,
                                              join_timeout=self._join_timeout)
        return self

    def join(self, init: bool = True, sync: Optional[Sync] = None) -> Generation:
        """Joins the first generation (or the current one after a restart) and,
        with init, forms its torch.distributed group and calls sync(). Returns
        the Generation."""
        self.start()
        return self._enter(lambda: self._rdzv.join(), init, sync)

    def reform(self, failed: bool = False, init: bool = True,
               sync: Optional[Sync] = None) -> Generation:
        """Destroys the process group formed here, joins the next generation
        and, with init, forms its group and calls sync(). failed: this
        generation is broken (a collective failed), so stintd opens a new
        round at once. Returns the new Generation."""
        self._require_joined()
        self.destroy_process_group()
        return self._enter(lambda: self._rdzv.reform(bool(failed)), init, sync)

    def step_boundary(self, stop: bool = False, failed: bool = False,
                      sync: Optional[Sync] = None) -> Boundary:
        """Once per step, after the optimizer step (or after a failed collective
        that skipped it). stop: this rank wants to stop (a preemption signal);
        a notice from stintd for this worker, or its fencing, counts too.
        failed: a collective of this step failed here. sync: as for join().
        Returns a Boundary, the same on every rank. REQUIRES: join() formed
        the process group (init=True)."""
        self._require_joined()
        if not self._formed_group:
            raise _C.FailedPreconditionError("step_boundary() needs the process group join() forms "
                                             "(init=True); with your own, use changed() and reform()")
        import torch
        import torch.distributed as dist

        stop = bool(stop) or self.preempted or self.fenced
        if not failed:
            flags = torch.tensor([1 if self._rdzv.changed() else 0, 1 if stop else 0],
                                 dtype=torch.int64)
            try:
                dist.all_reduce(flags, op=dist.ReduceOp.MAX)
            except RuntimeError:  # a peer is gone (DistBackendError and friends)
                failed = True
            else:
                if flags[1].item():
                    return Boundary(True, False, self._generation)
                if not flags[0].item():
                    return Boundary(False, False, self._generation)
        # A stop that met a failed agreement is agreed at the next boundary,
        # in the new generation (the caller's flag or the notice is still set).
        return Boundary(False, True, self.reform(failed=failed, sync=sync))

    def changed(self) -> bool:
        """True once stintd's generation differs from this one (a worker died,
        left or joined). One atomic load."""
        self._require_joined()
        return self._rdzv.changed()

    def destroy_process_group(self) -> None:
        """Destroys the default process group if join()/reform() formed it."""
        if self._formed_group:
            import torch.distributed as dist
            self._formed_group = False
            if dist.is_initialized():
                dist.destroy_process_group()

    def close(self, leave: bool = False) -> None:
        """Destroys the process group formed here, stops watching stintd and,
        unless the session was given, ends it (leave: tell stintd this worker
        is gone first, so the others re-form without waiting for its lease).
        Idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            self.destroy_process_group()
        finally:
            if self._rdzv is not None:
                self._rdzv.close()
            if self._session is not None and self._owns_session and not self._session.closed:
                try:
                    if leave and not self._session.fenced:
                        self._session.leave()
                except _C.Error:
                    pass  # the lease ends it anyway
                finally:
                    self._session.close()

    def __enter__(self) -> ElasticWorker:
        return self.start()

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> Literal[False]:
        # An exception (Ctrl-C included) leaves the job, so the others
        # re-form at once instead of after this worker's lease.
        self.close(leave=exc_type is not None)
        return False

    # -- state ------------------------------------------------------------------

    @property
    def generation(self) -> Optional[Generation]:
        """The current Generation (None before join())."""
        return self._generation

    @property
    def rank(self) -> int:
        return self._generation.rank if self._generation else -1

    @property
    def world_size(self) -> int:
        return self._generation.world_size if self._generation else 0

    @property
    def session(self) -> Optional[_C.CoordinatorSession]:
        """The stint._C.CoordinatorSession (None before start())."""
        return self._session

    @property
    def closed(self) -> bool:
        return self._closed

    # -- the coordinator --------------------------------------------------------

    def notice(self) -> Optional[Dict[str, Any]]:
        """None, or stintd's newest notice for this worker {'reason', 'deadline_ms',
        'notice_ms'} (wall clock ms): the GPUs go away at deadline_ms."""
        return self._session.notice() if self._session is not None else None

    @property
    def preempted(self) -> bool:
        """True once stintd sent this worker a notice."""
        return self.notice() is not None

    @property
    def fenced(self) -> bool:
        """True once stintd fenced this worker (its segment ended): stop, do not commit."""
        return self._session is not None and not self._session.closed and self._session.fenced

    def set_step(self, step: int) -> None:
        """The step sent with the next heartbeat (progress in stintctl). Cheap."""
        self._session.set_step(_check_step(step))

    def report_loss(self, loss: float, samples: Optional[int] = None) -> None:
        """The newest step's training loss (and the samples trained on so far),
        sent with the next heartbeat: stintd's loss curve and efficiency
        figures for the job. Cheap; a loss that is not finite is not sent."""
        self._session.report_loss(float(loss))
        if samples is not None:
            self._session.set_samples(int(samples))

    def finished(self) -> None:
        """The job is complete (one rank calls it, after the others are done)."""
        self._session.finished()

    def ack(self, step: int) -> None:
        """After a notice: the checkpoint of `step` is durable; the job goes back to the queue."""
        self._session.ack(_check_step(step))

    def leave(self) -> None:
        """This worker leaves the job without ending it."""
        self._session.leave()

    # -- internals --------------------------------------------------------------

    def _require_joined(self) -> None:
        if self._closed:
            raise _C.FailedPreconditionError("the elastic worker was closed")
        if self._rdzv is None or self._generation is None:
            raise _C.FailedPreconditionError("join() first")

    def _enter(self, join: Callable[[], Tuple[int, int, int, str, int, float]], init: bool,
               sync: Optional[Sync]) -> Generation:
        """join() answers a membership tuple; forms its group (with init) and
        syncs, joining the next generation while forming or syncing fails."""
        deadline = time.monotonic() + self._join_timeout
        answer = join()
        while True:
            self._generation = Generation(*answer)
            if not init:
                return self._generation
            try:
                self._init_process_group()
                if sync is not None:
                    sync()
                return self._generation
            except RuntimeError as e:
                if isinstance(e, _C.Error):
                    raise
                # A peer of the new generation died while it formed: that
                # generation failed too; join the next one.
                self.destroy_process_group()
                if time.monotonic() >= deadline:
                    raise
                answer = self._rdzv.reform(True)

    def _init_process_group(self) -> None:
        import torch.distributed as dist
        g = self._generation
        dist.init_process_group(self._backend, init_method=g.init_method, rank=g.rank,
                                world_size=g.world_size,
                                timeout=datetime.timedelta(seconds=self._pg_timeout))
        self._formed_group = True
