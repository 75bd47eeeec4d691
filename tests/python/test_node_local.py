"""Node-local roots through the Python API (issue 42): a 3-rank Gloo job whose
ranks each run on their own "node" (STINT_NODE_ID) with their own checkpoint
root, stint.Resumable(..., peer_replicas=2). A node lost with its disk after
step 4: the job resumes on a replacement node with an empty root, reads the
lost node's part from its peer replica, and ends bit-identical to a run that
was never interrupted.

stint.dcp too: a DCP save through StorageWriter(root, peer_replicas=2) on two
nodes, the node holding the data lost, dcp.load through StorageReader on a
replacement node reads it from the peer's replica.

Workers are this file run as a script (`test_node_local.py worker ROOT OUT
UNTIL LAST`, `test_node_local.py dcp ROOT OUT save|load`).
"""

import hashlib
import os
import shutil
import socket
import subprocess
import sys

import pytest

LAUNCH_DEADLINE = 300.0  # three processes importing torch on a loaded 2-core machine
NODES = ["a", "b", "c"]


def worker(root, out, until, last):
    import torch
    import torch.distributed as dist
    import stint

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Linear(16, 1))
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    run = stint.Resumable(root, model=model, optimizer=opt, save_every=2, watch_signals=False,
                          peer_replicas=2)
    step = run.resume()
    with open(os.path.join(out, "start-rank%d" % rank), "w") as f:
        f.write(str(step))
    while step < until:
        data = torch.randn(16, 8, generator=torch.Generator().manual_seed(step * 10 + rank))
        loss = model(data).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        # Gradients averaged one tensor at a time: the same summation order in
        # every run (DDP's buckets are rebuilt after a run's first step, which
        # with 3 ranks changes the order, and the bits, of a resumed run's sums).
        for p in model.parameters():
            dist.all_reduce(p.grad)
            p.grad /= dist.get_world_size()
        opt.step()
        step += 1
        run.step_boundary(step)
    if last:
        run.finish(step)
    else:  # cut short as a lost node would: the saves so far are all there is
        run.checkpointer.flush()
    run.checkpointer.flush_replication(120)
    h = hashlib.sha256()
    for t in list(model.state_dict().values()):
        h.update(t.detach().contiguous().numpy().tobytes())
    for state in opt.state_dict()["state"].values():
        for v in state.values():
            if torch.is_tensor(v):
                h.update(v.detach().contiguous().numpy().tobytes())
    with open(os.path.join(out, "digest-rank%d" % rank), "w") as f:
        f.write(h.hexdigest())
    dist.barrier()
    run.close()
    # Torch's Gloo threads can still be finalizing collectives at interpreter
    # exit (see test_resumable_ddp): the outcome is on disk already.
    os._exit(0)


def dcp_worker(root, out, phase):
    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp

    import stint

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    want = {"w": torch.arange(4096, dtype=torch.float32).reshape(64, 64) * 0.5,
            "b": torch.full((33,), 7, dtype=torch.int64)}
    if phase == "save":
        dcp.save(want, storage_writer=stint.dcp.StorageWriter(root, peer_replicas=2,
                                                              commit_timeout=60))
    else:
        got = {k: torch.zeros_like(v) for k, v in want.items()}
        dcp.load(got, storage_reader=stint.dcp.StorageReader(root))
        same = all(torch.equal(got[k], want[k]) for k in want)
        with open(os.path.join(out, "dcp-rank%d" % rank), "w") as f:
            f.write("same" if same else "DIFFERENT")
    dist.barrier()
    os._exit(0)


# -- the test -------------------------------------------------------------------------------------

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(python_env, roots, out, until, last=True, args=None):
    """Runs the 3-rank job to `until`; rank r on node NODES[r] with root roots[r]
    (or `args(rank)` with len(roots) ranks)."""
    os.makedirs(out, exist_ok=True)
    port = free_port()
    procs = []
    for rank, root in enumerate(roots):
        env = dict(python_env, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                   WORLD_SIZE=str(len(roots)), LOCAL_RANK="0", STINT_NODE_ID=NODES[rank])
        argv = args(rank) if args else ["worker", root, out, str(until), str(int(last))]
        procs.append(subprocess.Popen([sys.executable, __file__] + argv, env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    outputs = []
    for p in procs:
        try:
            text, _ = p.communicate(timeout=LAUNCH_DEADLINE)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise
        outputs.append(text)
    codes = [p.returncode for p in procs]
    assert codes == [0] * len(roots), "exits %r:\n%s" % (codes, "\n".join(
        "--- rank %d\n%s" % (r, text[-3000:]) for r, text in enumerate(outputs)))
    if args:
        return None
    read = lambda name: [open(os.path.join(out, "%s-rank%d" % (name, r))).read()
                         for r in range(len(roots))]
    return read("start"), read("digest")


def test_a_lost_node_resumes_from_its_peer_replica_bit_exactly(tmp_path, python_env):
    whole = [str(tmp_path / "whole" / n) for n in NODES]
    _, reference = launch(python_env, whole, str(tmp_path / "out-whole"), 8)
    assert len(set(reference)) == 1, "ranks disagree: %r" % reference

    roots = [str(tmp_path / "cut" / n) for n in NODES]
    launch(python_env, roots, str(tmp_path / "out-first"), 4, last=False)
    # Node b's part of step 4 is held by node c (the ring a -> b -> c -> a).
    assert os.path.exists(os.path.join(roots[2], ".peer-replicas", "step-00000004",
                                       "rank-00001.stint"))
    shutil.rmtree(roots[1])  # node b is lost with its disk; its replacement starts empty
    starts, digests = launch(python_env, roots, str(tmp_path / "out-second"), 8)
    assert starts == ["4"] * 3
    assert digests == reference


def test_a_step_lost_with_its_node_is_quarantined_on_every_root_and_saved_again(tmp_path,
                                                                                python_env):
    """Node b is lost before its part of step 4 reached its peer: step 4 stays
    committed in the roots of nodes a and c but cannot load anywhere. The job
    resumes from step 2 and saves step 4 again, which needs step 4 moved
    aside in every root that holds it, not only in rank 0's (node c's keeper
    refused the save: 'step-00000004 is already committed')."""
    whole = [str(tmp_path / "whole" / n) for n in NODES]
    _, reference = launch(python_env, whole, str(tmp_path / "out-whole"), 8)
    roots = [str(tmp_path / "cut" / n) for n in NODES]
    launch(python_env, roots, str(tmp_path / "out-first"), 4, last=False)
    shutil.rmtree(roots[1])
    # Node b's part of step 4 never reached node c, its holder.
    shutil.rmtree(os.path.join(roots[2], ".peer-replicas", "step-00000004"))
    for root in (roots[0], roots[2]):
        assert os.path.isdir(os.path.join(root, "step-00000004"))
    starts, digests = launch(python_env, roots, str(tmp_path / "out-second"), 8)
    assert starts == ["2"] * 3
    assert digests == reference
    for root in (roots[0], roots[2]):
        assert any(n.startswith("quarantine-step-00000004-") for n in os.listdir(root)), root


def test_dcp_loads_a_lost_nodes_data_from_its_peer_replica(tmp_path, python_env):
    roots = [str(tmp_path / n) for n in NODES[:2]]
    out = str(tmp_path / "out")
    launch(python_env, roots, out, 0, args=lambda r: ["dcp", roots[r], out, "save"])
    # DCP writes a replicated tensor once (rank 0, node a); its copy is on node b.
    assert os.path.isdir(os.path.join(roots[1], ".peer-replicas"))
    shutil.rmtree(roots[0])
    launch(python_env, roots, out, 0, args=lambda r: ["dcp", roots[r], out, "load"])
    assert [open(os.path.join(out, "dcp-rank%d" % r)).read() for r in range(2)] == ["same"] * 2


if __name__ == "__main__":
    if sys.argv[1] == "dcp":
        dcp_worker(sys.argv[2], sys.argv[3], sys.argv[4])
    elif sys.argv[1] == "worker":
        worker(sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5] == "1")
