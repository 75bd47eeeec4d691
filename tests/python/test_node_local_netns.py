"""Two and three nodes on one host, each in its own network namespace (issue 42): a
veth pair per node to a bridge, each node its own checkpoint root and
STINT_NODE_ID, one torchrun per node (static rendezvous at node a's
address) running an FSDP2 job (fully_shard over Gloo) that saves every step
to its node-local root and replicates to peers (tools/fault_campaign.py's
worker, state "fsdp", --replicate).

Node b is lost at a random point of a save or its replication (seed:
$STINT_TEST_SEED, else the clock; printed on failure): every process in its
namespace is SIGKILLed, its root deleted, its namespace (and so its
network) removed.
The survivors' workers fail their save and exit. The job is then launched
again with a replacement node b2 (a new namespace, an empty root): every
rank loads the same step, at least the newest one every node had
replicated before b went, reading b's part from its peer replica over the namespaces'
network, bit-identical to what was saved (the worker exits 3 otherwise), and
saves on.

Needs root (ip netns); skipped where namespaces cannot be made.
"""

import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CAMPAIGN = os.path.join(REPO, "tools", "fault_campaign.py")
# Six processes importing torch (three torchruns, three workers) on a loaded
# 2-core machine, then saves of a few MiB each: far above what it takes.
PHASE_DEADLINE = 300.0
PORT = 29511


def ip(*args, netns=None):
    cmd = (["ip", "netns", "exec", netns, "ip"] if netns else ["ip"]) + list(args)
    subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=30)


def _can_make_namespaces():
    if os.geteuid() != 0 or shutil.which("ip") is None:
        return False
    name = "stint-probe-%d" % os.getpid()
    try:
        ip("netns", "add", name)
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired):
        return False
    ip("netns", "del", name)
    return True


pytestmark = pytest.mark.skipif(not _can_make_namespaces(),
                                reason="needs root and ip netns (network namespaces)")


class Cluster:
    """A bridge in this namespace and one namespace per node, wired to it."""

    made = 0  # clusters made by this process: names and subnet differ from the last one's,
              # whose veths the kernel may still be removing

    def __init__(self):
        Cluster.made += 1
        self.tag = "%d%d" % (os.getpid() % 10000, Cluster.made % 10)
        self.subnet = "10.213.%d" % ((os.getpid() + Cluster.made) % 200 + 20)
        self.bridge = "stbr" + self.tag
        self.nodes = {}  # name -> (namespace, address)
        self.added = 0
        ip("link", "add", self.bridge, "type", "bridge")
        ip("link", "set", self.bridge, "up")

    def add(self, name):
        self.added += 1
        index = self.added + 1  # .1 is left to the bridge's side
        ns = "stint-%s-%s" % (self.tag, name)
        veth = "stv%s%d" % (self.tag, index)
        address = "%s.%d" % (self.subnet, index)
        ip("netns", "add", ns)
        self.nodes[name] = (ns, address)
        ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
        ip("link", "set", veth, "master", self.bridge, "up")
        ip("addr", "add", address + "/24", "dev", "eth0", netns=ns)
        ip("link", "set", "eth0", "up", netns=ns)
        ip("link", "set", "lo", "up", netns=ns)
        return address

    def lose(self, name):
        """SIGKILLs every process of the node, then removes its namespace."""
        ns, _ = self.nodes.pop(name)
        listed = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True,
                                timeout=30).stdout.split()
        for pid in listed:
            try:
                os.kill(int(pid), signal.SIGKILL)
            except ProcessLookupError:
                pass
        ip("netns", "del", ns)

    def close(self):
        for name in list(self.nodes):
            self.lose(name)
        subprocess.run(["ip", "link", "del", self.bridge], capture_output=True, timeout=30)


@pytest.fixture
def cluster():
    c = Cluster()
    try:
        yield c
    finally:
        c.close()


def events(path):
    try:
        with open(path) as f:
            return f.read()
    except FileNotFoundError:
        return ""


def start_node(cluster, python_env, name, node_rank, nnodes, root, events_path, steps):
    ns, _ = cluster.nodes[name]
    master = cluster.nodes["a"][1]
    # Gloo takes its address from the host name (the same on every "node"
    # here, and 127.0.0.1): the namespace's interface instead.
    env = dict(python_env, STINT_NODE_ID=name, OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME="eth0")
    cmd = ["ip", "netns", "exec", ns, sys.executable, "-m", "torch.distributed.run",
           "--nnodes", str(nnodes), "--node-rank", str(node_rank), "--nproc-per-node", "1",
           "--master-addr", master, "--master-port", str(PORT), "--max-restarts", "0",
           CAMPAIGN, "worker", "--root", root, "--events", events_path, "--state", "fsdp",
           "--steps", str(steps), "--pause", "0.3", "--replicate"]
    log = open(events_path + ".log", "w")
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
    log.close()
    return proc


def wait_until(what, predicate, procs, deadline):
    while not predicate():
        if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
            for p in procs:
                p.kill()
            pytest.fail("no %s within the deadline, or a node's torchrun exited: %r" % (
                what, [p.poll() for p in procs]))
        time.sleep(0.1)


@pytest.mark.parametrize("nodes", [("a", "b"), ("a", "b", "c")], ids=["2-nodes", "3-nodes"])
def test_a_lost_node_namespace_and_disk_resumes_from_peer_replicas(tmp_path, cluster,
                                                                  python_env, nodes):
    for name in nodes:
        cluster.add(name)
    roots = {n: str(tmp_path / ("root-" + n)) for n in nodes + ("b2",)}
    ev = {n: str(tmp_path / ("first-%s.events" % n)) for n in nodes}
    procs = [start_node(cluster, python_env, n, r, len(nodes), roots[n], ev[n], 40)
             for r, n in enumerate(nodes)]
    deadline = time.monotonic() + PHASE_DEADLINE
    wait_until("step 2 replicated on every node",
               lambda: all("replicated 2 " in events(ev[n]) for n in ev), procs, deadline)
    # Node b goes at a random point of a save or its replication (a save
    # takes milliseconds here, so the point is as random as the kill's
    # moment): processes, disk, network.
    seed = int(os.environ.get("STINT_TEST_SEED", time.time_ns() % 100000))
    rng = random.Random(seed)
    point = "%s %d " % (rng.choice(["saving", "durable", "replicated"]), rng.randint(3, 6))
    wait_until("node b at '%s' (seed %d)" % (point, seed), lambda: point in events(ev["b"]),
               procs, deadline)
    cluster.lose("b")
    survived = max(s for s in range(2, 41)
                   if all("replicated %d " % s in events(ev[n]) for n in ev))
    shutil.rmtree(roots["b"])
    for p in procs:
        try:
            p.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            pytest.fail("the survivors did not stop after losing node b:\n" +
                        "\n".join(events(ev[n] + ".log")[-2000:] for n in nodes if n != "b"))
    assert all(p.returncode != 0 for n, p in zip(nodes, procs) if n != "b")

    cluster.add("b2")
    replaced = tuple("b2" if n == "b" else n for n in nodes)
    ev2 = {n: str(tmp_path / ("second-%s.events" % n)) for n in replaced}
    procs = [start_node(cluster, python_env, n, r, len(nodes), roots[n], ev2[n], 2)
             for r, n in enumerate(replaced)]
    for p in procs:
        try:
            p.wait(timeout=PHASE_DEADLINE)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise
    logs = "seed %d, node b lost at '%s'\n" % (seed, point) + "\n".join(
        "--- %s\n%s\n%s" % (n, events(ev2[n]), events(ev2[n] + ".log")[-3000:]) for n in ev2)
    assert [p.returncode for p in procs] == [0] * len(nodes), logs
    loaded = [re.search(r"^loaded (\d+) (\S+)", events(ev2[n]), re.M) for n in ev2]
    assert all(m is not None and m.group(2) == "ok" for m in loaded), logs
    steps = {int(m.group(1)) for m in loaded}
    # At least the newest step every node had replicated before b went.
    assert len(steps) == 1 and steps.pop() >= survived, logs
    assert all("exit 0" in events(ev2[n]) for n in ev2), logs
    # The replacement node read b's part from a peer, then held its own.
    assert os.listdir(roots["b2"]), logs
