"""Round trips of real state dicts through stint.Checkpointer: dtypes,
layouts, nesting, plain values, optimizers, in-place loads."""

import collections
import math

import numpy as np
import pytest
import torch

import stint
from util import assert_same_tree, same_bits


def test_mixed_dtypes_round_trip_bit_exactly(root):
    g = torch.Generator().manual_seed(1)
    state = {
        "f32": torch.randn(7, 5, generator=g),
        "f64": torch.randn(3, generator=g, dtype=torch.float64),
        "f16": torch.randn(4, 4, generator=g).half(),
        "bf16": torch.randn(16, 3, generator=g).bfloat16(),
        "i8": torch.randint(-128, 127, (9,), generator=g, dtype=torch.int8),
        "u8": torch.randint(0, 255, (2, 2, 2), generator=g, dtype=torch.uint8),
        "i16": torch.randint(-1000, 1000, (5,), generator=g, dtype=torch.int16),
        "i32": torch.randint(-2**31, 2**31 - 1, (6,), generator=g, dtype=torch.int32),
        "i64": torch.tensor([-(2**63), 2**63 - 1, 0], dtype=torch.int64),
        "bool": torch.tensor([True, False, True]),
        "c64": torch.randn(3, generator=g, dtype=torch.complex64),
        "c128": torch.randn(2, 2, generator=g, dtype=torch.complex128),
        "special": torch.tensor([math.nan, math.inf, -math.inf, -0.0, 1e-45]),
    }
    with stint.Checkpointer(root) as ckpt:
        staged, durable = ckpt.save(1, state)
        assert staged.done()  # the snapshot is taken when save() returns
        assert durable.result(timeout=60) == 1
        back = ckpt.load()
    assert_same_tree(state, back)


def test_non_contiguous_and_empty_tensors(root):
    base = torch.arange(60, dtype=torch.float32).reshape(6, 10)
    state = {
        "transposed": base.t(),
        "strided": base[::2, 1::3],
        "expanded": torch.tensor([1.0, 2.0]).expand(4, 2),
        "conj": torch.tensor([1 + 2j, 3 - 4j], dtype=torch.complex64).conj(),
        "empty": torch.empty(0),
        "empty_2d": torch.empty(3, 0, 5, dtype=torch.bfloat16),
        "scalar": torch.tensor(3.5),
        "scalar_int": torch.tensor(7, dtype=torch.int64),
    }
    with stint.Checkpointer(root) as ckpt:
        ckpt.save(1, state).durable.result()
        back = ckpt.load()
    for k, v in state.items():
        assert back[k].shape == v.shape, k
        assert back[k].dtype == v.dtype, k
        assert torch.equal(back[k], v.resolve_conj()), k
        assert back[k].is_contiguous()
    assert back["conj"][0] == 1 - 2j


def test_nested_containers_and_plain_values_keep_types(root):
    od = collections.OrderedDict([("b", 1), ("a", 2)])
    od._metadata = {"": {"version": 2}}
    state = {
        "nested": {"list": [torch.ones(2), {"x": (1, 2.5, "three")}], "tuple": (None, True, False)},
        "int_keys": {0: "zero", 7: torch.zeros(1), -3: [1]},
        "mixed_keys": {1.5: "float key", (1, "a"): "tuple key", None: "none key", True: "bool key"},
        "floats": [0.1, -0.0, math.inf, -math.inf, 1e308, 5e-324],
        "big_int": 2**100,
        "neg": -(2**70),
        "text": "grüße, 世界",
        "empty_str": "",
        "empty_containers": [{}, [], ()],
        "bytes": b"\x00\x01binary\xff",
        "ordered": od,
        "dtype": torch.bfloat16,
        "device": torch.device("cpu"),
        "np_array": np.arange(6, dtype=np.float32).reshape(2, 3),
        "np_scalars": [np.float32(1.25), np.int64(-4), np.bool_(True)],
        "": "empty key",
        "dotted.key": torch.full((2,), 3.0),
        "dotted": {"key": torch.full((2,), 4.0)},  # prints like the key above
    }
    with stint.Checkpointer(root) as ckpt:
        ckpt.save(3, state).durable.result()
        back = ckpt.load()
    assert type(back["ordered"]) is collections.OrderedDict
    assert list(back["ordered"].items()) == [("b", 1), ("a", 2)]
    assert back["ordered"]._metadata == {"": {"version": 2}}
    assert isinstance(back["np_array"], np.ndarray) and back["np_array"].dtype == np.float32
    np.testing.assert_array_equal(back["np_array"], state["np_array"])
    assert [type(x) for x in back["np_scalars"]] == [np.float32, np.int64, np.bool_]
    assert back["np_scalars"] == state["np_scalars"]
    assert math.isnan(float("nan")) and back["floats"][1].hex() == "-0x0.0p+0"
    for key in ("ordered", "np_array", "np_scalars"):
        del state[key], back[key]
    assert_same_tree(state, back)
    assert torch.equal(back["dotted.key"], torch.full((2,), 3.0))
    assert torch.equal(back["dotted"]["key"], torch.full((2,), 4.0))


def test_nan_float_value_round_trips(root):
    with stint.Checkpointer(root) as ckpt:
        ckpt.save(1, {"nan": math.nan}).durable.result()
        assert math.isnan(ckpt.load()["nan"])


def test_top_level_tensor_and_list(root):
    with stint.Checkpointer(root) as ckpt:
        ckpt.save(1, torch.arange(4)).durable.result()
        assert torch.equal(ckpt.load(), torch.arange(4))
        ckpt.save(2, [torch.ones(1), 5]).durable.result()
        back = ckpt.load()
    assert isinstance(back, list) and back[1] == 5 and torch.equal(back[0], torch.ones(1))


def test_tied_tensors_load_as_one_shared_tensor(root):
    w = torch.randn(4, 3)
    state = {"embed.weight": w, "head.weight": w, "view": w[1:]}
    with stint.Checkpointer(root) as ckpt:
        ckpt.save(1, state).durable.result()
        back = ckpt.load()
        names = [t["name"] for t in stint.CheckpointReader(root + "/step-00000001").tensors()]
    assert back["embed.weight"] is back["head.weight"]
    assert torch.equal(back["view"], w[1:])
    assert sorted(names) == ["embed.weight", "view"]


def test_requires_grad_is_restored(root):
    p = torch.nn.Parameter(torch.randn(3))
    with stint.Checkpointer(root) as ckpt:
        ckpt.save(1, {"p": p, "plain": torch.randn(2)}).durable.result()
        back = ckpt.load()
    assert back["p"].requires_grad and not back["plain"].requires_grad
    assert torch.equal(back["p"].detach(), p.detach())


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(8, 16)
        self.bn = torch.nn.BatchNorm1d(16)
        self.fc2 = torch.nn.Linear(16, 4, dtype=torch.float64)
        self.emb = torch.nn.Embedding(10, 8).to(torch.bfloat16)

    def forward(self, x, ids):
        h = torch.relu(self.bn(self.fc1(x + self.emb(ids).float())))
        return self.fc2(h.double())


def _train(model, opt, steps, seed):
    g = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        x = torch.randn(5, 8, generator=g)
        ids = torch.randint(0, 10, (5,), generator=g)
        loss = model(x, ids).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()


@pytest.mark.parametrize("make_opt", [
    lambda p: torch.optim.Adam(p, lr=1e-2),
    lambda p: torch.optim.AdamW(p, lr=1e-2, amsgrad=True, weight_decay=0.1),
    lambda p: torch.optim.SGD(p, lr=1e-2, momentum=0.9, nesterov=True),
], ids=["adam", "adamw-amsgrad", "sgd-nesterov"])
def test_model_and_optimizer_state_dicts_resume_training_exactly(root, make_opt):
    torch.manual_seed(0)
    model = Net()
    opt = make_opt(model.parameters())
    _train(model, opt, 3, seed=1)
    with stint.Checkpointer(root) as ckpt:
        ckpt.save(3, {"model": model.state_dict(), "optim": opt.state_dict()}).durable.result()
        state = ckpt.load()
    assert_same_tree(opt.state_dict(), state["optim"])  # int keys, param_groups, step tensors
    assert set(state["optim"]["state"]) == set(range(len(list(model.parameters()))))

    torch.manual_seed(123)
    model2 = Net()
    opt2 = make_opt(model2.parameters())
    model2.load_state_dict(state["model"])
    opt2.load_state_dict(state["optim"])
    _train(model, opt, 4, seed=2)
    _train(model2, opt2, 4, seed=2)
    for (n, a), (_, b) in zip(model.state_dict().items(), model2.state_dict().items()):
        assert same_bits(a, b), n


def test_load_into_fills_tensors_in_place(root):
    torch.manual_seed(0)
    model = Net()
    with stint.Checkpointer(root) as ckpt:
        ckpt.save(1, {"model": model.state_dict(), "epoch": 4}).durable.result()
        saved = {k: v.clone() for k, v in model.state_dict().items()}
        torch.manual_seed(1)
        other = Net()
        into = {"model": other.state_dict()}
        ptrs = {k: v.data_ptr() for k, v in into["model"].items()}
        back = ckpt.load(into=into)
    assert back["epoch"] == 4
    for k, v in other.state_dict().items():
        assert same_bits(v, saved[k]), k
        assert back["model"][k] is into["model"][k]
        assert back["model"][k].data_ptr() == ptrs[k]


def test_load_into_non_contiguous_target(root):
    src = torch.arange(12.0).reshape(3, 4)
    target_base = torch.zeros(4, 3)
    target = target_base.t()  # (3, 4), not contiguous
    with stint.Checkpointer(root) as ckpt:
        ckpt.save(1, {"w": src}).durable.result()
        back = ckpt.load(into={"w": target})
    assert back["w"] is target
    assert torch.equal(target, src)


def test_load_into_shape_or_dtype_mismatch_raises(root):
    with stint.Checkpointer(root) as ckpt:
        ckpt.save(1, {"w": torch.zeros(2, 3)}).durable.result()
        with pytest.raises(stint.InvalidArgumentError, match=r"tensor 'w' has shape \[2, 3\] in the "
                                                              r"checkpoint, \[3, 2\] here"):
            ckpt.load(into={"w": torch.zeros(3, 2)})
        with pytest.raises(stint.InvalidArgumentError, match="'w' is float32 in the checkpoint, float64 here"):
            ckpt.load(into={"w": torch.zeros(2, 3, dtype=torch.float64)})


def test_load_into_with_a_tensor_the_checkpoint_lacks(root):
    with stint.Checkpointer(root) as ckpt:
        ckpt.save(1, {"w": torch.ones(2)}).durable.result()
        with pytest.raises(stint.NotFoundError, match=r"no tensor for state\['extra'\]"):
            ckpt.load(into={"w": torch.zeros(2), "extra": torch.zeros(1)})
        back = ckpt.load(into={"w": torch.zeros(2), "extra": torch.zeros(1)}, strict=False)
    assert torch.equal(back["w"], torch.ones(2)) and "extra" not in back


def test_load_specific_step_and_retention(root):
    with stint.Checkpointer(root, keep_last=2) as ckpt:
        for step in (10, 20, 30):
            ckpt.save(step, {"step": step, "t": torch.full((1,), float(step))}).durable.result()
        ckpt.flush()
        assert ckpt.list_committed() == [20, 30]
        assert ckpt.latest_step() == 30
        assert ckpt.load(step=20)["step"] == 20
        r = ckpt.load_result()
        assert (r.step, r.skipped) == (30, [])
        assert r.dir.endswith("step-00000030")
        with pytest.raises(stint.AlreadyExistsError, match="already committed"):
            ckpt.save(30, {})
        with pytest.raises(stint.InvalidArgumentError, match="non-negative int"):
            ckpt.save(-1, {})


def test_stats_and_futures(root):
    with stint.Checkpointer(root) as ckpt:
        h = ckpt.save(5, {"w": torch.zeros(1024)})
        assert h.step == 5 and not h.skipped and len(h) == 2
        h.durable.result()
        assert h.durable.done() and h.durable.exception() is None
        ckpt.flush()
        stats = ckpt.stats()
    assert stats["saves"] == 1 and stats["committed"] == 1 and stats["failed"] == 0
    assert stats["last"]["step"] == 5 and stats["last"]["raw_bytes"] >= 4096
    assert stats["last"]["engine"] in ("io_uring", "posix")


def test_checkpoint_survives_reopen_and_compression(root):
    state = {"w": torch.zeros(100000), "note": "zeros compress"}
    with stint.Checkpointer(root, compress=True, zstd_level=3, io_engine="posix") as ckpt:
        ckpt.save(1, state).durable.result()
        ckpt.flush()
        assert ckpt.stats()["last"]["stored_bytes"] < ckpt.stats()["last"]["raw_bytes"]
    with stint.Checkpointer(root) as again:
        assert_same_tree(state, again.load())


def test_unsupported_dtype_names_the_tensor(root):
    with stint.Checkpointer(root) as ckpt:
        with pytest.raises(stint.InvalidArgumentError, match="tensor 'opt.q': dtype UInt32 has no stint equivalent"):
            ckpt.save(1, {"opt": {"q": torch.zeros(2, dtype=torch.uint32)}})
        with pytest.raises(stint.InvalidArgumentError, match="tensor 's': only dense"):
            ckpt.save(2, {"s": torch.eye(2).to_sparse()})
        assert ckpt.list_committed() == []


def test_unsupported_python_objects_raise_type_error(root):
    with stint.Checkpointer(root) as ckpt:
        with pytest.raises(TypeError, match=r"state\['a'\]\[0\]: cannot checkpoint an object of type object"):
            ckpt.save(1, {"a": [object()]})
        with pytest.raises(TypeError, match="dict key of type frozenset"):
            ckpt.save(1, {frozenset(): 1})
        with pytest.raises(TypeError, match="subclass of int"):
            import enum
            ckpt.save(1, {"e": enum.IntEnum("E", "A B").A})


def test_closed_checkpointer_raises(root):
    ckpt = stint.Checkpointer(root)
    ckpt.close()
    ckpt.close()
    assert ckpt.closed
    with pytest.raises(stint.FailedPreconditionError, match="the checkpointer is closed"):
        ckpt.save(1, {})


def test_reader_reads_a_checkpoint(root):
    state = {"a": torch.arange(5), "b": {"c": torch.ones(2, 2)}, "n": 1}
    with stint.Checkpointer(root, job_id="job-7") as ckpt:
        ckpt.save(9, state).durable.result()
    r = stint.CheckpointReader(root + "/step-00000009")
    assert (r.step, r.job_id, r.world_size) == (9, "job-7", 1)
    infos = {t["name"]: t for t in r.tensors()}
    assert infos["b.c"]["dtype"] == "float32" and infos["b.c"]["shape"] == (2, 2)
    assert "stint.pytree" in r.blob_names()
    assert torch.equal(r.read(["a"])["a"], torch.arange(5))
    assert r.verify()["chunks"] >= 3
    assert_same_tree(state, r.state())
    with pytest.raises(stint.NotFoundError, match="'zzz'"):
        r.read(["zzz"])


def test_one_reader_read_from_several_threads(root):
    """One CheckpointReader called from four threads at once (as torch_checkpointing's storage
    reads files on a pool): every read completes with the saved bytes. Two threads draining the
    reader's one I/O ring used to wait forever, each for a completion the other had taken."""
    import threading
    import time
    g = torch.Generator().manual_seed(3)
    state = {"t%d" % i: torch.randn(256, 1024, generator=g) for i in range(12)}
    with stint.Checkpointer(root) as ckpt:
        ckpt.save(1, state).durable.result()
    r = stint.CheckpointReader(root + "/step-00000001")
    wrong, errors = [], []

    def reads(k):
        try:
            for j in range(25):
                names = ["t%d" % ((k * 5 + j + m) % 12) for m in range(3)]
                got = r.read(names)
                wrong.extend(n for n in names if not torch.equal(got[n], state[n]))
                if j % 5 == 0:
                    r.read_blob("stint.pytree")
        except BaseException as e:  # noqa: B902  (reported below)
            errors.append(e)

    threads = [threading.Thread(target=reads, args=(k,), daemon=True) for k in range(4)]
    for t in threads:
        t.start()
    # 300 reads of 3 MiB each: seconds; a reader that hangs never ends.
    deadline = time.monotonic() + 120
    for t in threads:
        t.join(timeout=max(0.0, deadline - time.monotonic()))
    assert not any(t.is_alive() for t in threads), "a read from one of the threads hangs"
    assert not errors and not wrong, (errors, wrong)


def test_load_a_flat_checkpoint_without_structure(root):
    """Checkpoints written without the Python structure blob (the C++ API) load as {name: value}."""
    c = stint._C.Checkpointer(root)
    c.save(1, ["x.w"], [torch.arange(3)], {"meta": b"hello"}).durable.result()
    c.close()
    with stint.Checkpointer(root) as ckpt:
        back = ckpt.load()
        assert torch.equal(back["x.w"], torch.arange(3)) and back["meta"] == b"hello"
        target = torch.zeros(3, dtype=torch.int64)
        back = ckpt.load(into={"x.w": target})
        assert back["x.w"] is target and torch.equal(target, torch.arange(3))
