"""stint: asynchronous checkpoints and exact, preemption-safe resume for PyTorch.

    import stint
    ckpt = stint.Checkpointer("/nvme/ckpt/job-42")
    staged, durable = ckpt.save(step, {"model": model.state_dict(), "optim": opt.state_dict()})
    state = ckpt.load()

    sampler = stint.ResumableSampler(len(dataset), global_batch=64)
    run = stint.Resumable("/nvme/ckpt/job-42", model=model, optimizer=opt, sampler=sampler)

See the docstrings of Checkpointer (collective over the ranks of a
torch.distributed job: DTensor/FSDP2 state dicts as they are), Resumable,
ResumableSampler, PreemptionWatcher and capture_rng; stint.dcp has a
StorageWriter and StorageReader for torch.distributed.checkpoint. Every error is a stint.Error subclass
(DataLossError, NotFoundError, ...; most also subclass the closest builtin,
e.g. NotFoundError is a FileNotFoundError) carrying the runtime's message.
I/O errors are OSErrors with errno: IoError (the syscall's errno),
ResourceExhaustedError (ENOSPC, EDQUOT for a full disk), NotFoundError
(ENOENT), AlreadyExistsError (EEXIST), PermissionDeniedError (EACCES).
"""

from typing import Any, Dict

import torch as _torch  # noqa: F401  (loads LibTorch before the extension that links it)

from . import _C
from ._C import (  # noqa: F401
    AbortedError,
    AlreadyExistsError,
    CancelledError,
    DataLossError,
    DeadlineExceededError,
    Error,
    FailedPreconditionError,
    Future,
    IndexPermutation,
    InternalError,
    InvalidArgumentError,
    IoError,
    NotFoundError,
    PermissionDeniedError,
    PreemptionPlan,
    ResourceExhaustedError,
    SaveHandle,
    UnauthenticatedError,
    UnavailableError,
    UnimplementedError,
)
from .checkpointer import Checkpointer, CheckpointReader, LoadResult  # noqa: F401
from .preemption import PreemptionNotice, PreemptionWatcher, shield_from_preemption  # noqa: F401
from .resumable import Resumable  # noqa: F401
from .rng import capture_rng, restore_rng  # noqa: F401
from .sampler import ResumableSampler  # noqa: F401

EXIT_REQUEUE: int = _C.EXIT_REQUEUE              # 75: preempted, state saved or loss reported: requeue
EXIT_DO_NOT_REQUEUE: int = _C.EXIT_DO_NOT_REQUEUE  # 76: a fatal error a restart cannot fix


def launch_env() -> Dict[str, Any]:
    """{'rank', 'world_size', 'local_rank', 'node_rank', 'launcher', 'master_addr',
    'master_port', 'job_id', 'restart_count'} from torchrun's or Slurm's environment
    (under Slurm the master is the first host of SLURM_JOB_NODELIST and the port
    15000 + job id mod 10000, unless MASTER_ADDR / MASTER_PORT are set)."""
    return _C.launch_env()


def __getattr__(name: str) -> Any:
    # stint.dcp imports torch.distributed.checkpoint (seconds): only when used.
    if name == "dcp":
        import importlib
        return importlib.import_module(".dcp", __name__)
    raise AttributeError("module 'stint' has no attribute %r" % name)


# project(stint VERSION ...) in CMakeLists.txt, compiled into _C (stint/version.h);
# the same number the manifest records as its writer and pip reports.
__version__: str = _C.__version__
__all__ = [
    "Checkpointer", "CheckpointReader", "LoadResult", "SaveHandle", "Future",
    "ResumableSampler", "IndexPermutation", "Resumable",
    "PreemptionWatcher", "PreemptionNotice", "PreemptionPlan", "shield_from_preemption",
    "capture_rng", "restore_rng", "launch_env", "EXIT_REQUEUE", "EXIT_DO_NOT_REQUEUE",
    "Error", "CancelledError", "InvalidArgumentError", "NotFoundError", "AlreadyExistsError",
    "FailedPreconditionError", "AbortedError", "UnavailableError", "DeadlineExceededError",
    "ResourceExhaustedError", "DataLossError", "IoError", "InternalError", "UnimplementedError",
    "UnauthenticatedError", "PermissionDeniedError",
]
