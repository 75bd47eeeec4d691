"""elastic_ddp.py: data-parallel PyTorch training over torch.distributed
(gloo) whose workers come and go, grouped by stintd (the lines marked
"# stint"). The Python twin of examples/elastic_training.

Each worker registers with stintd, joins the job's rendezvous and calls
torch.distributed.init_process_group for its generation; when a worker dies
or a new one joins, the others re-form the group at the next step boundary
and carry on from rank 0's state.

Task: least-squares regression of 8 inputs (a fixed teacher), SGD with
momentum. The loss is summed over this rank's samples and divided by the
global batch, so the all-reduced gradient is the global batch's mean
whatever the world size: any sequence of resizes trains the same model as one
process would (up to float summation order). The data order is
stint.ResumableSampler's: every step's global batch is a function of one
global cursor, and rank r of W takes the r-th slice. The model carries a
"seen" counter per sample, summed by the same all_reduce as the gradients and
applied with the optimizer step, so the final model itself says how often
each sample was trained on.

    PYTHONPATH=build/python_bindings .venv/bin/python examples/python/elastic_ddp.py \\
        --url http://127.0.0.1:7077 --token $STINTD_WORKER_TOKEN --job 1 --steps 300 --out /tmp/result.json
    .venv/bin/python examples/python/elastic_ddp.py --reference --steps 300 --out /tmp/reference.json

--url/--token/--job default to $STINT_COORD_URL, $STINT_COORD_TOKEN and
$STINT_JOB_ID. --hold STEP:WORLD (repeatable, a test hook) makes the group
train no further than step STEP until it has WORLD workers, so a test can
kill or add a worker mid-run without depending on timing; the pending holds
are part of the synchronized state.

Prints "GENERATION g rank r world w reform_s x step s" whenever a generation
is formed, "FIRST_STEP g step s" at its first committed step,
"COLLECTIVE_FAILED step s: ...", "PREEMPTED step s" and "DONE step s rank r".
Rank 0 writes --out (JSON: step, params, seen) at the end. Exit codes: 0
done, 75 preempted or fenced (requeue), 3 a stint error, 4 the final barrier
failed.
"""

import argparse
import json
import sys
import time

import torch
import torch.distributed as dist

import stint
import stint.elastic

INPUTS, DATASET, GLOBAL_BATCH = 8, 240, 12


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--url")
    p.add_argument("--token")
    p.add_argument("--job", type=int)
    p.add_argument("--name")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--step-sleep", type=float, default=0.0, help="seconds to sleep after every step")
    p.add_argument("--out")
    p.add_argument("--pg-timeout", type=float, default=30.0,
                   help="seconds: init_process_group's timeout, which bounds every collective")
    p.add_argument("--join-timeout", type=float, default=120.0)
    p.add_argument("--hold", action="append", default=[], metavar="STEP:WORLD")
    p.add_argument("--reference", action="store_true", help="one process, no stintd")
    args = p.parse_args(argv)
    args.hold = sorted(tuple(int(v) for v in h.split(":")) for h in args.hold)
    if args.reference and not args.out:
        p.error("--reference needs --out")
    return args


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(INPUTS, 1)
        self.register_buffer("seen", torch.zeros(DATASET, dtype=torch.float64))

    def forward(self, x):
        return self.fc(x)


def batch(ids):
    """Sample i: inputs from a fixed formula, target from a fixed teacher plus a
    little structure, so the answer does not depend on who computes it."""
    i = torch.tensor(ids, dtype=torch.float64).reshape(-1, 1)
    j = torch.arange(INPUTS, dtype=torch.float64).reshape(1, -1)
    v = torch.sin(0.37 * i + 1.3 * j)
    target = 0.3 + (v * (0.5 - 0.1 * j)).sum(dim=1, keepdim=True) + 0.05 * torch.cos(i)
    return v.float(), target.float()


def local_step(net, ids):
    """Forward and backward on this rank's slice; the sample counter delta goes with the gradients."""
    net.zero_grad()
    x, y = batch(ids)
    loss = (net(x) - y).pow(2).sum() / GLOBAL_BATCH
    loss.backward()
    delta = torch.zeros(DATASET, dtype=torch.float64)
    delta.index_add_(0, torch.tensor(ids, dtype=torch.int64), torch.ones(len(ids), dtype=torch.float64))
    return delta


def apply(net, opt, delta):
    opt.step()
    with torch.no_grad():
        net.seen.add_(delta)


def all_reduce_step(net, delta):
    """Sums the gradients and the counter delta over the group in one all_reduce
    (float64, so the counts stay exact). Raises RuntimeError when a peer is gone."""
    params = list(net.parameters())
    flat = torch.cat([p.grad.reshape(-1).double() for p in params] + [delta])
    dist.all_reduce(flat)
    at = 0
    for p in params:
        n = p.numel()
        p.grad.copy_(flat[at:at + n].view_as(p.grad))
        at += n
    delta.copy_(flat[at:])


def make_sampler():
    return stint.ResumableSampler(DATASET, GLOBAL_BATCH, seed=7, rank=0, world_size=1)


def write_result(path, net, step):
    with torch.no_grad():
        params = [float(v) for p in net.parameters() for v in p.reshape(-1).tolist()]
        seen = net.seen.tolist()
    with open(path, "w") as f:
        json.dump({"step": step, "params": params, "seen": seen}, f)


def run_reference(args):
    torch.manual_seed(0)
    net = Net()
    opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
    sampler = make_sampler()
    for step in range(args.steps):
        delta = local_step(net, sampler.indices_at_step(step, 0, 1))
        apply(net, opt, delta)
        sampler.commit_step()
    print("DONE step %d" % args.steps, flush=True)
    write_result(args.out, net, args.steps)
    return 0


class TrainState:
    """What every rank makes rank 0's after a group forms: parameters and
    buffers (torch.distributed.broadcast, in place), the optimizer's state,
    the data cursor, the step and the pending holds (broadcast_object_list)."""

    def __init__(self, net, opt, sampler, holds):
        self.net, self.opt, self.sampler = net, opt, sampler
        self.step = 0
        self.holds = list(holds)

    def sync(self):
        for t in self.net.state_dict().values():
            dist.broadcast(t, src=0)
        box = [None]
        if dist.get_rank() == 0:
            box[0] = {"optim": self.opt.state_dict(), "sampler": self.sampler.state_dict(),
                      "step": self.step, "holds": self.holds}
        dist.broadcast_object_list(box, src=0)
        if dist.get_rank() != 0:
            self.opt.load_state_dict(box[0]["optim"])
            self.sampler.load_state_dict(box[0]["sampler"])
            self.step = box[0]["step"]
            self.holds = box[0]["holds"]


def print_generation(gen, step):
    print("GENERATION %d rank %d world %d reform_s %.3f step %d"
          % (gen.generation, gen.rank, gen.world_size, gen.reform_seconds, step), flush=True)


def run_worker(args):
    torch.manual_seed(0)
    net = Net()
    opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
    sampler = make_sampler()
    state = TrainState(net, opt, sampler, args.hold)
    watcher = stint.PreemptionWatcher()  # stint: SIGTERM, SIGUSR1
    # stint: register with stintd (heartbeats on the session's threads), watch the rendezvous.
    worker = stint.elastic.ElasticWorker(args.url, args.token, args.job, worker_name=args.name,
                                         join_timeout=args.join_timeout, backend="gloo",
                                         pg_timeout=args.pg_timeout)
    with worker:
        print_generation(worker.join(sync=state.sync), state.step)  # stint: init_process_group, state from rank 0
        first_step = True
        while state.step < args.steps:
            if state.holds and state.step >= state.holds[0][0]:
                # Every rank sees the same step, world and holds here.
                if worker.world_size == state.holds[0][1]:
                    state.holds.pop(0)
                    continue
                time.sleep(0.05)
                failed = False
            else:
                ids = sampler.indices_at_step(state.step, worker.rank, worker.world_size)
                delta = local_step(net, ids)
                try:
                    all_reduce_step(net, delta)
                    failed = False
                except RuntimeError as e:  # a peer died: skip this step, re-form below
                    print("COLLECTIVE_FAILED step %d: %s" % (state.step, str(e).splitlines()[0][:200]),
                          flush=True)
                    failed = True
                if not failed:
                    apply(net, opt, delta)
                    sampler.commit_step()
                    state.step += 1
                    worker.set_step(state.step)  # stint: progress with the next heartbeat
                    if first_step:
                        print("FIRST_STEP %d step %d" % (worker.generation.generation, state.step), flush=True)
                        first_step = False
                if args.step_sleep > 0:
                    time.sleep(args.step_sleep)
            # stint: re-forms here when needed; every rank stops at the same step.
            b = worker.step_boundary(stop=watcher.requested, failed=failed, sync=state.sync)
            if b.stop:
                print("PREEMPTED step %d" % state.step, flush=True)
                return stint.EXIT_REQUEUE
            if b.reformed:
                print_generation(b.generation, state.step)
                first_step = True
        # Everyone reached the end before rank 0 reports the job complete.
        try:
            dist.barrier()
            barrier_ok = True
        except RuntimeError:
            barrier_ok = False
        print("DONE step %d rank %d" % (state.step, worker.rank), flush=True)
        if worker.rank != 0:
            return 0 if barrier_ok else 4
        if args.out:
            write_result(args.out, net, state.step)
        worker.finished()  # stint
    return 0


def main(argv):
    args = parse_args(argv)
    if args.reference:
        return run_reference(args)
    try:
        return run_worker(args)
    except stint.Error as e:
        print("%s: %s" % (type(e).__name__, e), file=sys.stderr, flush=True)
        fenced = isinstance(e, stint.AbortedError) and str(e).startswith("fenced")
        return stint.EXIT_REQUEUE if fenced else 3


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
