"""Status errors as Python exceptions: classes, builtin bases, unchanged
messages; corrupt checkpoints are refused loudly and skipped over."""

import errno
import json
import os
import subprocess
import sys

import pytest
import torch

import stint


def _save_steps(root, steps, size=4096):
    with stint.Checkpointer(root, keep_last=0) as ckpt:
        for s in steps:
            ckpt.save(s, {"w": torch.full((size,), float(s)), "step": s}).durable.result()


def _flip_byte(path, offset):
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ 0x40]))


def test_exception_classes_and_builtin_bases():
    assert issubclass(stint.DataLossError, stint.Error)
    assert issubclass(stint.NotFoundError, FileNotFoundError)
    assert issubclass(stint.AlreadyExistsError, FileExistsError)
    assert issubclass(stint.InvalidArgumentError, ValueError)
    assert issubclass(stint.DeadlineExceededError, TimeoutError)
    assert issubclass(stint.IoError, OSError)
    assert issubclass(stint.UnimplementedError, NotImplementedError)
    assert issubclass(stint.PermissionDeniedError, PermissionError)
    assert stint.DataLossError.code == "DATA_LOSS"
    assert stint.DataLossError.__module__ == "stint" and stint.DataLossError.__name__ == "DataLossError"
    names = [c for c in dir(stint) if c.endswith("Error") and c != "Error"]
    assert len(names) == 15  # one per stint::Code but OK
    assert len({getattr(stint, c).code for c in names}) == 15


def test_no_checkpoint_is_not_found_with_the_runtime_message(root):
    with stint.Checkpointer(root) as ckpt:
        with pytest.raises(FileNotFoundError) as info:
            ckpt.load()
    e = info.value
    assert isinstance(e, stint.NotFoundError)
    assert str(e) == root + ": no committed checkpoint to load"  # the C++ message, unchanged
    assert e.code == "NOT_FOUND" and e.sys_errno == 0


def test_invalid_options_raise_invalid_argument():
    with pytest.raises(stint.InvalidArgumentError, match="^chunk_size must be a positive multiple of 4096, got 1000$"):
        stint.Checkpointer("/tmp/never-created-by-stint", chunk_size=1000)
    with pytest.raises(stint.InvalidArgumentError, match="busy_policy must be 'block' or 'skip'"):
        stint.Checkpointer("/tmp/never-created-by-stint", busy_policy="drop")
    with pytest.raises(stint.InvalidArgumentError, match="CheckpointOptions.root is empty"):
        stint.Checkpointer("")


def test_root_that_is_a_file(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(stint.Error) as info:
        stint.Checkpointer(str(f))
    assert str(f) in str(info.value)


def test_io_errors_carry_errno(tmp_path):
    blocker = tmp_path / "blocker"
    blocker.write_text("x")
    with pytest.raises(OSError) as info:
        stint.Checkpointer(str(blocker / "sub"))
    assert isinstance(info.value, stint.Error)
    assert info.value.errno == errno.ENOTDIR and info.value.sys_errno == errno.ENOTDIR


def test_corrupt_chunk_raises_data_loss_naming_file_and_chunk(root):
    _save_steps(root, [1])
    data = os.path.join(root, "step-00000001", "rank-00000.stint")
    _flip_byte(data, 100)  # inside the first chunk (tensor 'w')
    with stint.Checkpointer(root) as ckpt:
        with pytest.raises(stint.DataLossError) as info:
            ckpt.load()
    msg = str(info.value)
    assert "no checkpoint loads and verifies" in msg
    assert "rank-00000.stint chunk 0" in msg and "checksum mismatch" in msg and "tensor w" in msg
    with pytest.raises(stint.DataLossError, match="checksum mismatch"):
        stint.CheckpointReader(os.path.join(root, "step-00000001")).verify()


def test_newest_corrupt_checkpoint_is_skipped_and_reported(root):
    _save_steps(root, [1, 2])
    _flip_byte(os.path.join(root, "step-00000002", "rank-00000.stint"), 10)
    with stint.Checkpointer(root) as ckpt:
        r = ckpt.load_result()
        assert r.step == 1 and r.state["step"] == 1
        assert r.skipped_steps == [2]
        assert r.skipped[0].startswith("step-00000002: DATA_LOSS:") and "checksum mismatch" in r.skipped[0]
        # Asking for that step explicitly is an error, not a fallback.
        with pytest.raises(stint.DataLossError, match="checksum mismatch"):
            ckpt.load(step=2)
        ckpt.quarantine(2)
        assert ckpt.list_committed() == [1]
    assert any(n.startswith("quarantine-step-00000002-") for n in os.listdir(root))


def test_truncated_data_file(root):
    _save_steps(root, [1])
    data = os.path.join(root, "step-00000001", "rank-00000.stint")
    os.truncate(data, 4096)
    with stint.Checkpointer(root) as ckpt:
        with pytest.raises(stint.DataLossError, match=r"rank-00000.stint: is 4096 bytes, manifest says \d+ \(truncated\)"):
            ckpt.load()


def test_tampered_manifest(root):
    _save_steps(root, [1])
    path = os.path.join(root, "step-00000001", "MANIFEST.json")
    doc = json.load(open(path))
    doc["manifest"]["step"] = 99
    json.dump(doc, open(path, "w"))
    with stint.Checkpointer(root) as ckpt:
        with pytest.raises(stint.DataLossError) as info:
            ckpt.load()
    assert "MANIFEST.json" in str(info.value)


def test_missing_data_file(root):
    _save_steps(root, [1])
    os.remove(os.path.join(root, "step-00000001", "rank-00000.stint"))
    with pytest.raises(stint.DataLossError, match="data file listed in the manifest is missing"):
        stint.CheckpointReader(os.path.join(root, "step-00000001"))


def test_corrupt_structure_blob_falls_back(root):
    """A structure blob that is not JSON (checksums intact: written that way) is damage too."""
    c = stint._C.Checkpointer(root)
    c.save(1, ["w"], [torch.ones(1)], {"stint.pytree": b'{"format":"stint.pytree","version":1,"root":["tensor","w"]}'}).durable.result()
    c.save(2, ["w"], [torch.ones(1)], {"stint.pytree": b"not json"}).durable.result()
    c.close()
    with stint.Checkpointer(root) as ckpt:
        r = ckpt.load_result()
        assert r.step == 1 and torch.equal(r.state, torch.ones(1))
        assert "blob 'stint.pytree' is not valid JSON" in r.skipped[0]


def test_newer_structure_version_is_unimplemented(root):
    c = stint._C.Checkpointer(root)
    c.save(1, [], [], {"stint.pytree": b'{"format":"stint.pytree","version":9,"root":null}'}).durable.result()
    c.close()
    with stint.Checkpointer(root) as ckpt:
        with pytest.raises(NotImplementedError, match="state structure version 9; this stint reads version 1"):
            ckpt.load()  # no candidate is damaged: what stopped them, naming the cause
        with pytest.raises(NotImplementedError, match="state structure version 9"):
            ckpt.load(step=1)


def test_python_exception_in_planner_propagates_unchanged(root):
    _save_steps(root, [1])
    c = stint._C.Checkpointer(root)

    class Boom(Exception):
        pass

    def planner(reader):
        raise Boom("from the planner")

    with pytest.raises(Boom, match="from the planner"):
        c.load(planner)
    kept = []
    with pytest.raises(stint.FailedPreconditionError, match="belonged to a load planner call"):
        c.load(lambda reader: (kept.append(reader), ([], ["w"]))[1])
        kept[0].tensors()
    c.close()


def test_planner_with_wrong_return_type(root):
    _save_steps(root, [1])
    c = stint._C.Checkpointer(root)
    with pytest.raises(stint.InvalidArgumentError, match="planner must return"):
        c.load(lambda reader: 42)
    c.close()


def test_staging_pool_too_small(root):
    with stint.Checkpointer(root, staging_bytes=8192) as ckpt:
        with pytest.raises(stint.ResourceExhaustedError, match="staging pool: snapshot needs \\d+ bytes, capacity is 8192"):
            ckpt.save(1, {"w": torch.zeros(1 << 16)})


def test_background_failure_reaches_the_future_not_the_next_save(root):
    import shutil
    ckpt = stint.Checkpointer(root)
    shutil.rmtree(root)  # the persist thread cannot create its .tmp- directory
    h = ckpt.save(1, {"w": torch.zeros(16)})
    assert h.staged.result() == 1  # the snapshot itself worked
    with pytest.raises(stint.NotFoundError) as info:
        h.durable.result(timeout=60)
    assert isinstance(h.durable.exception(), stint.NotFoundError)
    assert str(h.durable.exception()) == str(info.value)
    os.makedirs(root)
    assert ckpt.save(2, {"w": torch.zeros(16)}).durable.result(timeout=60) == 2
    ckpt.close()


def test_result_of_a_done_future_needs_no_time(root):
    with stint.Checkpointer(root) as ckpt:
        h = ckpt.save(1, {"w": torch.zeros(16)})
        h.durable.result()
        assert h.durable.result(timeout=0) == 1  # done: no wait needed


def test_not_found_is_an_oserror_with_enoent(root):
    with stint.Checkpointer(root) as ckpt:
        with pytest.raises(OSError) as info:
            ckpt.load()
    assert isinstance(info.value, stint.NotFoundError)
    assert info.value.errno == errno.ENOENT
    assert info.value.sys_errno == 0  # not from a syscall: errno is what the class stands for


# Saves 16 MiB into a root on a 2 MiB filesystem; prints what it caught as OSError.
_FILL_THE_DISK = r'''
import sys
import torch
import stint

ckpt = stint.Checkpointer(sys.argv[1], io_engine="posix", direct_io=False)
try:
    ckpt.save(1, {"w": torch.zeros(4 << 20)}).durable.result(timeout=120)
    print("saved")
except OSError as e:
    print("caught", type(e).__name__, e.errno, e.sys_errno, e)
ckpt.close()
'''


def _private_tmpfs(path):
    """argv prefix that runs a command with a 2 MiB tmpfs mounted on `path`, in
    a mount namespace of its own (gone with the command: nothing to clean up),
    or None where this process may not make one."""
    for userns in ([], ["--user", "--map-root-user"]):
        prefix = ["unshare"] + userns + ["--mount", "--propagation", "private", "sh", "-c",
                                         'mount -t tmpfs -o size=2m stint-full "$0" && exec "$@"',
                                         path]
        try:
            probe = subprocess.run(prefix + ["true"], capture_output=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if probe.returncode == 0:
            return prefix
    return None


def test_a_full_disk_is_an_oserror_with_enospc(tmp_path, python_env):
    """A real full filesystem: the save's error is a ResourceExhaustedError
    that `except OSError` catches, with errno ENOSPC."""
    small = tmp_path / "small"
    small.mkdir()
    prefix = _private_tmpfs(str(small))
    if prefix is None:
        pytest.skip("cannot mount a tmpfs here (needs root or user namespaces)")
    script = tmp_path / "fill.py"
    script.write_text(_FILL_THE_DISK)
    out = subprocess.run(prefix + [sys.executable, str(script), str(small / "ckpt")],
                         capture_output=True, text=True, env=python_env, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.startswith("caught ResourceExhaustedError %d %d " % (errno.ENOSPC, errno.ENOSPC)), \
        out.stdout + out.stderr


def test_a_step_beyond_64_bits_is_a_value_error_naming_the_step_and_the_bound(root):
    big = 2**64
    message = r"step 18446744073709551616 is out of range: a step is at most 2\*\*64 - 1 = 18446744073709551615"
    with stint.Checkpointer(root) as ckpt:
        for call in (lambda: ckpt.save(big, {"w": torch.ones(2)}), lambda: ckpt.load(step=big),
                     lambda: ckpt.load_result(step=big), lambda: ckpt.quarantine(big)):
            with pytest.raises(ValueError, match=message):
                call()
        ckpt.save(big - 1, {"w": torch.ones(2)}).durable.result()  # the bound itself is a step
        assert ckpt.list_committed() == [big - 1]
        assert torch.equal(ckpt.load(step=big - 1)["w"], torch.ones(2))
    sampler = stint.ResumableSampler(8, 2, rank=0, world_size=1)
    with pytest.raises(ValueError, match=message):
        sampler.indices_at_step(big)
    from stint import dcp
    with pytest.raises(ValueError, match=message):
        dcp.StorageWriter(root, step=big)
