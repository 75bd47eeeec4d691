"""Slurm without a stint service: what stint.Resumable does when its job
runs under srun (one task per GPU, no torchrun in between).

  ranks      stint.distributed.init_from_env(): SLURM_PROCID, SLURM_NTASKS,
             SLURM_LOCALID; the master is the first host of
             SLURM_JOB_NODELIST (expanded here: no scontrol needed)
  notices    SIGTERM (preemption with GraceTime, the time limit; SIGKILL
             follows after KillWait), SIGUSR1 / SIGUSR2 (--signal=USR1@N);
             and the job's own end time (SLURM_JOB_END_TIME on Slurm 23.02+,
             else asked once from squeue): the run stops in time for its
             last checkpoint even without --signal
  requeue    once the stop's checkpoint is durable, rank 0 runs `scontrol
             requeue $SLURM_JOB_ID` as the process exits (a requeue ends
             every task at once, so never earlier); with
             STINT_SLURM_REQUEUE=script (what `stint slurm submit`'s batch
             script sets) the tasks only exit 75 and the script requeues,
             which also works where scontrol is missing (containers)
  decision   every task records the stop in the root's REQUEUE before
             returning from step_boundary() (job id, restart count, step,
             the durable step): the batch script requeues on it when a task
             then dies of a signal instead of exiting 75
  completion finish() writes the root's COMPLETE marker; a later start of
             the run (a requeue racing the end, a resubmission) exits 0 at
             once

Slurm 22.05's behaviour behind these choices: ../shared/research/cluster_engines_2026.md.
"""

from __future__ import annotations

import atexit
import logging
import os
from typing import Any, Dict, Optional

import torch
import torch.distributed

from . import _C

_log = logging.getLogger("stint")

# STINT_SLURM_REQUEUE: "self" (default: rank 0 runs scontrol requeue at exit)
# or "script" (the batch script requeues when srun exits 75).
REQUEUE_ENV = "STINT_SLURM_REQUEUE"


def under_slurm(launch: Dict[str, Any]) -> bool:
    """Whether launch_env() says this process is a Slurm task of a job."""
    return launch["launcher"] == "slurm" and bool(launch["job_id"])


def job_end_time(launch: Dict[str, Any], group: Any = None) -> Optional[float]:
    """The job's end (UNIX seconds), or None without a limit or when it
    cannot be learnt (logged). With a group, rank 0 asks squeue and the
    others get its answer (one all-reduce), so N tasks do not ask N times."""
    end = float("-inf")
    if group is None or torch.distributed.get_rank(group) == 0:
        try:
            got = _C.slurm_job_end_time(launch["job_id"])
            end = got if got is not None else float("inf")
        except _C.Error as e:
            _log.warning("stint: the end time of Slurm job %s is unknown (%s); only signals "
                         "will stop the run", launch["job_id"], e)
    if group is not None:
        from .resumable import _collective_device
        t = torch.tensor([end], dtype=torch.float64, device=_collective_device(group))
        torch.distributed.all_reduce(t, op=torch.distributed.ReduceOp.MAX, group=group)
        end = float(t.item())
    return end if end not in (float("inf"), float("-inf")) else None


def record_decision(launch: Dict[str, Any], root: str, rank: int, step: int,
                    durable: Optional[int]) -> None:
    """Writes root/REQUEUE durably (stint/slurm.h, RecordSlurmStop):
    "slurm_job=ID restart=N step=S durable=D". Every rank writes it, so it
    is there whichever task dies first after the stop. A failure is logged:
    the exit code still says 75."""
    try:
        _C.record_slurm_stop(root, rank, str(launch["job_id"]), int(launch["restart_count"]),
                             step, durable)
    except _C.Error as e:
        _log.warning("stint: %s: a task that dies before exiting %d fails the Slurm job",
                     e, _C.EXIT_REQUEUE)


def requeue_at_exit(launch: Dict[str, Any], rank: int) -> None:
    """After the stop's checkpoint: rank 0 requeues the job as this process
    exits (unless the batch script does, STINT_SLURM_REQUEUE=script)."""
    mode = os.environ.get(REQUEUE_ENV, "self")
    if rank != 0 or mode == "script":
        return
    if mode != "self":
        raise _C.InvalidArgumentError("%s=%r: must be 'self' or 'script'" % (REQUEUE_ENV, mode))
    job = launch["job_id"]

    def requeue() -> None:
        try:
            _C.slurm_requeue(job)
            _log.warning("stint: requeued Slurm job %s (scontrol requeue)", job)
        except _C.NotFoundError:
            _log.warning("stint: no scontrol here: exiting %d for the batch script to requeue "
                         "Slurm job %s", _C.EXIT_REQUEUE, job)
        except _C.Error as e:
            _log.warning("stint: scontrol requeue %s failed: %s", job, e)

    atexit.register(requeue)
