"""Loads into existing state dicts, as a resumed job makes them: a model and
its AdamW state come back bit-exact in their own tensors (large ones over
several chunks, thousands of small ones read in merged requests, O_DIRECT
and page-cache reads straight into place), through Checkpointer.load(into=),
Resumable.resume() and dcp.load with stint's StorageReader; a destination of
another dtype or shape is refused naming the tensor; damage among small
tensors or inside a tensor read in place fails the load naming the tensor,
the file and the offset; and a load sets off no cyclic garbage collection
of the caller's heap. No timings here: tools/stint-bench/python_load_bench.py
measures them."""

import gc
import os
import re
import warnings

import pytest
import torch

import stint


def _bits(t):
    return t.detach().reshape(-1).contiguous().view(torch.uint8).numpy().tobytes()


def _model_and_adamw(widths=(300, 257, 129), seed=0):
    """Linear layers (odd sizes: rows are not whole pages) and AdamW after two steps."""
    torch.manual_seed(seed)
    model = torch.nn.Sequential(*[torch.nn.Linear(w, w + 3) for w in widths])
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for _ in range(2):
        for p in model.parameters():
            p.grad = torch.randn_like(p)
        opt.step()
    return model, opt


def _lora_like(blocks=300, d=24, r=4, seed=0):
    """Many small tensors: a frozen base and rank-r adapters per block, AdamW on the adapters."""
    torch.manual_seed(seed)
    params = {}
    for i in range(blocks):
        params["b%d_base" % i] = torch.nn.Parameter(torch.randn(d, d), requires_grad=False)
        params["b%d_A" % i] = torch.nn.Parameter(torch.randn(r, d))
        params["b%d_B" % i] = torch.nn.Parameter(torch.randn(d, r))
    model = torch.nn.ParameterDict(params)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    for p in model.parameters():
        if p.requires_grad:
            p.grad = torch.randn_like(p)
    opt.step()
    return model, opt


def _state(model, opt):
    return {"model": model.state_dict(), "optim": opt.state_dict()}


def _flat(state):
    out = {}

    def walk(x, path):
        if isinstance(x, torch.Tensor):
            out[path] = x
        elif isinstance(x, dict):
            for k, v in x.items():
                walk(v, path + "/" + str(k))
        elif isinstance(x, (list, tuple)):
            for i, v in enumerate(x):
                walk(v, path + "/" + str(i))

    walk(state, "")
    return out


def _scramble(state):
    with torch.no_grad():
        for t in _flat(state).values():
            t.view(-1).view(torch.uint8).fill_(0xA5)


def _assert_loaded_in_place(saved_bits, into, loaded=None):
    flat_into = _flat(into)
    assert flat_into.keys() == saved_bits.keys()
    if loaded is not None:
        flat_loaded = _flat(loaded)
        assert flat_loaded.keys() == flat_into.keys()
    for path, t in flat_into.items():
        if loaded is not None:
            assert flat_loaded[path] is t, path  # filled in place, returned as itself
        assert _bits(t) == saved_bits[path], path


def _damage(path, victim_bits):
    """Flips a bit inside `victim_bits` in the file; returns the offset of its chunk."""
    with open(path, "r+b") as f:
        data = bytearray(f.read())
        at = bytes(data).find(victim_bits)
        assert at >= 0
        data[at + len(victim_bits) // 2] ^= 0x40
        f.seek(0)
        f.write(bytes(data))
    return at


@pytest.mark.parametrize("direct_io", [True, False])
def test_model_and_adamw_load_in_place_bit_exactly(root, direct_io):
    model, opt = _model_and_adamw()
    state = _state(model, opt)
    saved = {p: _bits(t) for p, t in _flat(state).items()}
    # 16 KiB chunks: each large tensor spans several, the last one short.
    with stint.Checkpointer(root, chunk_size=16384) as ck:
        ck.save(1, state).durable.result()
    _scramble(state)
    with stint.Checkpointer(root, read_only=True, direct_io=direct_io) as ck:
        loaded = ck.load(into=state)
    _assert_loaded_in_place(saved, state, loaded)


@pytest.mark.parametrize("direct_io", [True, False])
def test_thousands_of_small_tensors_load_in_place_bit_exactly(root, direct_io):
    model, opt = _lora_like()
    state = _state(model, opt)
    assert len(_flat(state)) > 2000
    saved = {p: _bits(t) for p, t in _flat(state).items()}
    with stint.Checkpointer(root) as ck:
        ck.save(1, state).durable.result()
    _scramble(state)
    with stint.Checkpointer(root, read_only=True, direct_io=direct_io) as ck:
        loaded = ck.load(into=state)
    _assert_loaded_in_place(saved, state, loaded)


def test_resume_restores_model_and_adamw_bit_exactly(root):
    model, opt = _model_and_adamw(seed=1)
    saved = {p: _bits(t) for p, t in _flat(_state(model, opt)).items()}
    with stint.Resumable(root, model=model, optimizer=opt, watch_signals=False,
                         save_every=0) as run:
        run.save(7, wait=True)
    # A restart: a new model with other weights, an optimizer with no state yet.
    model2, _ = _model_and_adamw(seed=2)
    opt2 = torch.optim.AdamW(model2.parameters(), lr=1e-2)
    with stint.Resumable(root, model=model2, optimizer=opt2, watch_signals=False,
                         save_every=0) as run:
        assert run.resume() == 7
    restored = {p: _bits(t) for p, t in _flat(_state(model2, opt2)).items()}
    assert restored == saved


@pytest.mark.parametrize("small", [False, True])
def test_dcp_load_with_stint_reader_fills_the_state_in_place_bit_exactly(root, small):
    import torch.distributed.checkpoint as dcp
    import stint.dcp
    warnings.simplefilter("ignore")
    state = _state(*(_lora_like(blocks=100) if small else _model_and_adamw()))
    saved = {p: _bits(t) for p, t in _flat(state).items()}
    dcp.save(state, storage_writer=stint.dcp.StorageWriter(root))
    tensors = _flat(state)
    _scramble(state)
    dcp.load(state, storage_reader=stint.dcp.StorageReader(root))
    _assert_loaded_in_place(saved, state)
    assert all(_flat(state)[p] is t for p, t in tensors.items())  # the same tensors, filled


def test_destination_of_another_dtype_or_shape_is_refused_naming_it(root):
    model, opt = _model_and_adamw()
    state = _state(model, opt)
    with stint.Checkpointer(root) as ck:
        ck.save(1, state).durable.result()
    with stint.Checkpointer(root, read_only=True) as ck:
        wrong = _state(*_model_and_adamw())
        wrong["model"]["0.weight"] = wrong["model"]["0.weight"].double()
        with pytest.raises(stint.InvalidArgumentError, match=r"0\.weight.*float32.*float64"):
            ck.load(into=wrong)
        wrong = _state(*_model_and_adamw())
        wrong["optim"]["state"][0]["exp_avg"] = torch.zeros(3, 300)
        with pytest.raises(stint.InvalidArgumentError,
                           match=r"state\.0\.exp_avg.*\[303, 300\].*\[3, 300\]"):
            ck.load(into=wrong)


@pytest.mark.parametrize("direct_io", [True, False])
def test_damage_among_small_tensors_names_tensor_file_and_offset(root, direct_io):
    model, opt = _lora_like(blocks=200)
    state = _state(model, opt)
    with stint.Checkpointer(root) as ck:
        ck.save(1, state).durable.result()
    path = os.path.join(root, "step-00000001", "rank-00000.stint")
    at = _damage(path, _bits(state["model"]["b117_A"]))
    with stint.Checkpointer(root, read_only=True, direct_io=direct_io) as ck:
        # The only checkpoint: the load fails, nothing is reported loaded.
        with pytest.raises(stint.DataLossError) as info:
            ck.load(into=state)
    msg = str(info.value)
    assert re.search(r"%s chunk 0 \(tensor model\.b117_A shard 0\) at offset %d: checksum "
                     r"mismatch" % (re.escape(path), at), msg), msg


@pytest.mark.parametrize("direct_io", [True, False])
def test_damage_inside_a_tensor_read_in_place_fails_the_load(root, direct_io):
    # A page-aligned destination (O_DIRECT reads straight into it) or any
    # (buffered reads do): the bytes land in the caller's tensor before they
    # are checked, and the load must still fail.
    big = torch.arange(3 << 20, dtype=torch.float32)  # 12 MiB: two chunks
    with stint.Checkpointer(root) as ck:
        ck.save(1, {"big": big}).durable.result()
    path = os.path.join(root, "step-00000001", "rank-00000.stint")
    second = _bits(big)[8 << 20:]  # the second chunk's bytes
    at = _damage(path, second[:1 << 20])
    into = {"big": torch.empty(3 << 20, dtype=torch.float32)}
    with stint.Checkpointer(root, read_only=True, direct_io=direct_io) as ck:
        with pytest.raises(stint.DataLossError) as info:
            ck.load(into=into)
    msg = str(info.value)
    assert re.search(r"%s chunk 1 \(tensor big shard 0\) at offset %d: checksum mismatch"
                     % (re.escape(path), at), msg), msg


def test_damage_under_dcp_load_with_stint_reader_names_file_and_offset(root):
    import torch.distributed.checkpoint as dcp
    import stint.dcp
    warnings.simplefilter("ignore")
    model, opt = _lora_like(blocks=50)
    state = _state(model, opt)
    dcp.save(state, storage_writer=stint.dcp.StorageWriter(root))
    path = os.path.join(root, "step-00000000", "rank-00000.stint")
    at = _damage(path, _bits(state["model"]["b17_B"]))
    with pytest.raises(BaseException) as info:
        dcp.load(state, storage_reader=stint.dcp.StorageReader(root))
    errors = stint.dcp.stint_errors(info.value)
    assert errors and all(isinstance(e, stint.DataLossError) for e in errors), repr(info.value)
    assert any(re.search(r"%s chunk 0 \(tensor model\.b17_B shard 0\) at offset %d"
                         % (re.escape(path), at), str(e)) for e in errors), errors


def test_load_sets_off_no_cyclic_collection(root):
    model, opt = _lora_like(blocks=100)
    state = _state(model, opt)
    with stint.Checkpointer(root) as ck:
        ck.save(1, state).durable.result()
    active = [False]
    collections = []

    def seen(phase, info):
        if phase == "start" and active[0]:
            collections.append(info["generation"])

    old = gc.get_threshold()
    # Every allocation would start a collection: a load of 1,200 tensors
    # makes thousands of containers (its structure, its plan, the state).
    gc.set_threshold(1, 1, 1)
    gc.callbacks.append(seen)
    try:
        with stint.Checkpointer(root, read_only=True) as ck:
            active[0] = True
            ck.load(into=state)
            active[0] = False
    finally:
        active[0] = False
        gc.callbacks.remove(seen)
        gc.set_threshold(*old)
    # A few from the allocations on the way in and out; unpaused, thousands.
    assert len(collections) <= 16, "%d collections during the load" % len(collections)
    assert gc.isenabled()
