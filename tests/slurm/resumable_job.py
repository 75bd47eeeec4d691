"""A data-parallel training job for the Slurm tests, run as one srun task
per GPU (no torchrun): stint.Resumable initialises Gloo from Slurm's
variables, checkpoints every SAVE_EVERY steps, stops on Slurm's notices and
requeues the job; the final parameters' digest goes to OUT/final-rank<r>.

    resumable_job.py ROOT OUT TOTAL_STEPS STEP_SECONDS [ddp|fsdp] [FAULT]

ddp (the default): DistributedDataParallel, the model and optimizer whole
on every rank; fsdp: FSDP2 (fully_shard), each rank holding its shards of
the parameters and optimizer state (DTensors) and checkpointing them.

FAULT, in the job's first run (restart 0) only: abort-after-stop, rank 1
dies of SIGABRT once every rank is past its stop (the checkpoint durable)
instead of exiting 75, as a crash in a process's teardown would;
abort-at-N, rank 1 dies of SIGABRT at step N, a crash before any stop.

Every start appends one line to OUT/starts: restart count, the stintd
segment (under stintd --slurm, else -), rank, world size, the step it
resumed at; every stop one line to OUT/stops.
"""

import hashlib
import logging
import os
import sys
import time

import torch
from torch.nn.parallel import DistributedDataParallel

import stint

SAVE_EVERY = 20


def _append(path, line):
    with open(path, "a") as f:  # O_APPEND: one write per line, ranks do not interleave
        f.write(line + "\n")


def main(root, out, total, step_seconds, parallel="ddp", fault=""):
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    torch.set_num_threads(1)
    torch.manual_seed(0)  # the same initial model on every rank
    model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.Dropout(0.25), torch.nn.Linear(32, 1))
    # Under srun stint.Resumable would do it; under stintd --slurm the ranks
    # come as torchrun's variables.
    stint.distributed.init_from_env()
    if parallel == "fsdp":  # sharded before the optimizer sees the parameters
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard
        fully_shard(model, mesh=init_device_mesh("cpu", (torch.distributed.get_world_size(),)))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    sampler = stint.ResumableSampler(256, 8, seed=3)  # rank and world size from the launcher
    run = stint.Resumable(root, model=model, optimizer=opt, sampler=sampler, save_every=SAVE_EVERY)
    env = run.launch
    rank = torch.distributed.get_rank()
    torch.manual_seed(100 + rank)  # dropout differs per rank: the RNG is resumed per rank
    # No bucket rebuild (README, "DDP and FSDP"): a restarted DDP would sum the
    # first step's gradients of 4 ranks in another order than the run it resumes.
    net = model if parallel == "fsdp" else DistributedDataParallel(model, find_unused_parameters=True)
    data = torch.randn(256, 8, generator=torch.Generator().manual_seed(7))
    step = run.resume()
    segment = os.environ.get("STINT_SEGMENT_ID", "-")
    faulty = rank == 1 and env["restart_count"] == 0
    _append(os.path.join(out, "starts"), "restart=%d segment=%s rank=%d world=%d step=%d at=%.3f" % (
        env["restart_count"], segment, rank, env["world_size"], step, time.time()))
    while step < total:
        for ids in sampler:
            loss = net(data[ids]).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            step += 1
            time.sleep(step_seconds)
            if faulty and fault == "abort-at-%d" % step:
                os.abort()
            if run.step_boundary(step):
                notice = run.watcher.notice()
                # age: from the notice (the signal's arrival) to here, the checkpoint durable.
                _append(os.path.join(out, "stops"), "restart=%d segment=%s rank=%d step=%d source=%s "
                        "at=%.3f age=%.3f durable=%s" % (env["restart_count"], segment, rank, step,
                                                 notice.source.replace(" ", "_"), time.time(),
                                                 notice.seconds_since_received, run.last_durable_step))
                run.close()
                if fault == "abort-after-stop" and env["restart_count"] == 0:
                    torch.distributed.barrier()  # every rank's stop line is written
                    if faulty:
                        os.abort()
                sys.exit(run.exit_code)
            if step >= total:
                break
    run.finish(step)
    digest = hashlib.sha256()
    for name, t in sorted(model.state_dict().items()):
        if hasattr(t, "full_tensor"):  # FSDP2's shards: the whole tensor (a collective)
            t = t.full_tensor()
        digest.update(name.encode())
        digest.update(t.contiguous().numpy().tobytes())
    with open(os.path.join(out, "final-rank%d" % rank), "w") as f:
        f.write(digest.hexdigest())
    run.close()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), *sys.argv[5:])
