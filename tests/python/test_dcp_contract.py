"""stint.dcp against torch.distributed.checkpoint's contract: what DCP's own
FileSystemWriter/Reader accept, stint's StorageWriter/Reader accept too.

The multi-process tests run this file as a worker script (`python
test_dcp_contract.py <phase>` with RANK/WORLD_SIZE in the environment) on
Gloo/CPU, every wait bounded by a subprocess timeout.
"""

import os
import sys
import warnings

import pytest
import torch

import torch.distributed.checkpoint as dcp

from util import root_entries

WORKER_TIMEOUT = 120  # seconds per multi-process phase, start-up included (loaded cores)


def _cached_state(rank, step):
    """Rank `rank`'s state at save `step` of the plan caching tests (layout changes at 2)."""
    sd = {"shared": torch.arange(6.0) + 10 * step, "own%d" % rank: torch.full((3,), rank + step)}
    if step == 2 and rank == 1:
        sd["extra"] = torch.tensor([step, 7.0])
    return sd


def _caching_planner_class():
    from torch.distributed.checkpoint import DefaultSavePlanner

    # Its own class: DCP caches plans per planner class name, process-wide.
    class CachingPlanner(DefaultSavePlanner):
        pass
    return CachingPlanner


_CachingPlanner = _caching_planner_class()


def _worker(phase):
    import torch.distributed as dist

    import stint.dcp

    warnings.simplefilter("ignore")
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    root = os.environ["DCP_ROOT"]
    dist.init_process_group("gloo", init_method="file://" + os.environ["DCP_INIT"],
                            rank=rank, world_size=world)
    if phase == "zero_rank":
        # Rank 1 has nothing of its own, and DCP's dedup gives the replicated
        # "shared" to one rank only: rank 1 writes 0 bytes.
        shared = torch.arange(12.0).reshape(3, 4)
        sd = {"shared": shared, "own": torch.full((5,), 7.0)} if rank == 0 else \
            {"shared": shared.clone()}
        dcp.save(sd, storage_writer=stint.dcp.StorageWriter(root, commit_timeout=60))
        out = {"shared": torch.zeros(3, 4)}
        if rank == 0:
            out["own"] = torch.zeros(5)
        dcp.load(out, storage_reader=stint.dcp.StorageReader(root, commit_timeout=60))
        assert torch.equal(out["shared"], shared), out
        if rank == 0:
            assert torch.equal(out["own"], torch.full((5,), 7.0)), out
        empty = {}
        dcp.save(empty, storage_writer=stint.dcp.StorageWriter(root, commit_timeout=60))
        dcp.load(empty, storage_reader=stint.dcp.StorageReader(root, commit_timeout=60))
    elif phase == "two_shards_per_rank":
        # A ShardedTensor with 4 placements over 2 ranks: 2 chunks of "st" per rank.
        from torch.distributed._shard import sharded_tensor
        from torch.distributed._shard.sharding_spec import ChunkShardingSpec
        spec = ChunkShardingSpec(dim=0, placements=["rank:%d/cpu" % (i % 2) for i in range(4)])
        full = torch.arange(8 * 3, dtype=torch.float32).reshape(8, 3)

        def filled(value):
            st = sharded_tensor.empty(spec, 8, 3)
            for shard in st.local_shards():
                first = shard.metadata.shard_offsets[0]
                shard.tensor.copy_(value[first:first + shard.tensor.shape[0]])
            return st
        st = filled(full)
        assert len(st.local_shards()) == 2
        dcp.save({"st": st}, storage_writer=stint.dcp.StorageWriter(root, commit_timeout=60))
        out = {"st": filled(torch.zeros(8, 3))}
        dcp.load(out, storage_reader=stint.dcp.StorageReader(root, commit_timeout=60))
        for shard in out["st"].local_shards():
            first = shard.metadata.shard_offsets[0]
            assert torch.equal(shard.tensor, full[first:first + shard.tensor.shape[0]]), first
    elif phase == "plan_cache":
        # Saves 1 and 2: no rank's plan changed (all cached); save 3: only
        # rank 1's changed. Each commits its own step with its own values.
        for step in range(3):
            sd = _cached_state(rank, step)
            dcp.save(sd, storage_writer=stint.dcp.StorageWriter(root, commit_timeout=60),
                     planner=_CachingPlanner(enable_plan_caching=True))
        for step in range(3):
            out = {k: torch.zeros_like(v) for k, v in _cached_state(rank, step).items()}
            dcp.load(out, storage_reader=stint.dcp.StorageReader(root, step=step,
                                                                 commit_timeout=60))
            for k, v in _cached_state(rank, step).items():
                assert torch.equal(out[k], v), (step, k, out[k], v)
    dist.barrier()
    dist.destroy_process_group()


def _run_ranks(phase, world, root, tmp_path, python_env):
    from util import run_ranks
    env = dict(python_env, DCP_ROOT=root, DCP_INIT=str(tmp_path / ("init-" + phase)),
               DCP_STACKS_AFTER=str(WORKER_TIMEOUT - 10), OMP_NUM_THREADS="1")
    run_ranks(__file__, [phase], world, env, tmp_path, phase, WORKER_TIMEOUT)


def _data_files(step_dir):
    return {name: os.path.getsize(os.path.join(step_dir, name))
            for name in os.listdir(step_dir) if name.endswith(".stint")}


# ---- zero bytes ---------------------------------------------------------------------

def test_empty_state_dict_saves_and_loads(root):
    import stint.dcp
    warnings.simplefilter("ignore")
    writer = stint.dcp.StorageWriter(root)
    dcp.save({}, storage_writer=writer)
    assert writer.last_step == 0
    assert _data_files(os.path.join(root, "step-00000000")) == {"rank-00000.stint": 0}
    out = {}
    dcp.load(out, storage_reader=stint.dcp.StorageReader(root))
    assert out == {}
    # An empty tensor alone, then a load of it: no bytes either way.
    dcp.save({"e": torch.zeros(0, 3)}, storage_writer=stint.dcp.StorageWriter(root))
    out = {"e": torch.ones(0, 3)}
    dcp.load(out, storage_reader=stint.dcp.StorageReader(root))
    assert out["e"].shape == (0, 3)


def test_a_rank_with_nothing_to_write_commits_with_the_others(root, tmp_path, python_env):
    _run_ranks("zero_rank", 2, root, tmp_path, python_env)
    files = _data_files(os.path.join(root, "step-00000000"))
    assert sorted(files) == ["rank-00000.stint", "rank-00001.stint"], files
    assert files["rank-00001.stint"] == 0, files
    assert sorted(_data_files(os.path.join(root, "step-00000001")).values()) == [0, 0]


# ---- overwrite ----------------------------------------------------------------------

def test_overwrite_false_refuses_an_existing_checkpoint_as_filesystemwriter(root):
    import stint.dcp
    warnings.simplefilter("ignore")
    sd = {"w": torch.arange(4.0)}
    dcp.save(sd, storage_writer=stint.dcp.StorageWriter(root, overwrite=False))
    before = root_entries(root)
    with pytest.raises(BaseException, match="Checkpoint already exists"):
        dcp.save(sd, storage_writer=stint.dcp.StorageWriter(root, overwrite=False))
    assert root_entries(root) == before
    # A step not saved yet is no existing checkpoint; once saved, it is.
    dcp.save(sd, storage_writer=stint.dcp.StorageWriter(root, overwrite=False),
             checkpoint_id=os.path.join(root, "step-7"))
    with pytest.raises(BaseException, match="Checkpoint already exists"):
        dcp.save(sd, storage_writer=stint.dcp.StorageWriter(root, overwrite=False),
                 checkpoint_id=7)
    assert root_entries(root) == [".writer.lock", "LATEST", "step-00000000", "step-00000007"]
    # overwrite=True (the default, as FileSystemWriter's): the new save is what loads.
    dcp.save({"w": sd["w"] * 3}, storage_writer=stint.dcp.StorageWriter(root))
    out = {"w": torch.zeros(4)}
    dcp.load(out, storage_reader=stint.dcp.StorageReader(root))
    assert torch.equal(out["w"], sd["w"] * 3)


# ---- several chunks of one tensor on one rank -----------------------------------------

def test_two_chunks_of_one_tensor_on_one_rank_save_and_load_exactly(root):
    import dataclasses
    from torch.distributed.checkpoint import DefaultSavePlanner
    from torch.distributed.checkpoint.metadata import ChunkStorageMetadata, MetadataIndex
    from torch.distributed.checkpoint.planner import WriteItemType
    import stint.dcp
    warnings.simplefilter("ignore")

    class RowHalvesPlanner(DefaultSavePlanner):
        """Writes tensor "w" as two row chunks (as a rank holding two shards does)."""

        def create_local_plan(self):
            plan = super().create_local_plan()
            items = []
            for item in plan.items:
                if item.index.fqn != "w":
                    items.append(item)
                    continue
                rows, cols = item.tensor_data.size
                for first, n in ((0, 2), (2, rows - 2)):
                    chunk = ChunkStorageMetadata(offsets=torch.Size([first, 0]),
                                                 sizes=torch.Size([n, cols]))
                    items.append(dataclasses.replace(
                        item, type=WriteItemType.SHARD,
                        index=MetadataIndex("w", torch.Size([first, 0])),
                        tensor_data=dataclasses.replace(item.tensor_data, chunk=chunk)))
            self.plan = dataclasses.replace(plan, items=items)
            return self.plan

        def resolve_data(self, item):
            if item.index.fqn != "w":
                return super().resolve_data(item)
            chunk = item.tensor_data.chunk
            return self.state_dict["w"].narrow(0, chunk.offsets[0], chunk.sizes[0])

    w = torch.randn(5, 3)
    b = torch.randn(4)
    dcp.save({"w": w, "b": b}, storage_writer=stint.dcp.StorageWriter(root),
             planner=RowHalvesPlanner())
    metadata = stint.dcp.StorageReader(root).read_metadata()
    assert sorted((tuple(c.offsets), tuple(c.sizes))
                  for c in metadata.state_dict_metadata["w"].chunks) == \
        [((0, 0), (2, 3)), ((2, 0), (3, 3))]
    out = {"w": torch.zeros(5, 3), "b": torch.zeros(4)}
    dcp.load(out, storage_reader=stint.dcp.StorageReader(root))
    from util import same_bits
    assert same_bits(out["w"], w) and same_bits(out["b"], b)


def test_sharded_tensor_with_more_placements_than_ranks(root, tmp_path, python_env):
    import stint.dcp
    _run_ranks("two_shards_per_rank", 2, root, tmp_path, python_env)
    metadata = stint.dcp.StorageReader(root).read_metadata()
    assert sorted(tuple(c.offsets) for c in metadata.state_dict_metadata["st"].chunks) == \
        [(0, 0), (2, 0), (4, 0), (6, 0)]
    out = {"st": torch.zeros(8, 3)}
    dcp.load(out, storage_reader=stint.dcp.StorageReader(root))
    assert torch.equal(out["st"], torch.arange(8 * 3, dtype=torch.float32).reshape(8, 3))


# ---- planner plan caching -------------------------------------------------------------

def test_plan_caching_saves_each_step_with_its_values(root):
    import stint.dcp
    warnings.simplefilter("ignore")
    for step in range(3):
        dcp.save(_cached_state(1, step), storage_writer=stint.dcp.StorageWriter(root),
                 planner=_CachingPlanner(enable_plan_caching=True))
    assert root_entries(root) == [".writer.lock", "LATEST", "step-00000000", "step-00000001",
                                        "step-00000002"]
    for step in range(3):
        want = _cached_state(1, step)
        out = {k: torch.zeros_like(v) for k, v in want.items()}
        dcp.load(out, storage_reader=stint.dcp.StorageReader(root, step=step))
        for k in want:
            assert torch.equal(out[k], want[k]), (step, k)


def test_plan_caching_over_two_ranks(root, tmp_path, python_env):
    _run_ranks("plan_cache", 2, root, tmp_path, python_env)
    assert root_entries(root) == [".writer.lock", "LATEST", "step-00000000", "step-00000001",
                                        "step-00000002"]


# ---- export ---------------------------------------------------------------------------

def test_export_to_torch_save_and_to_dcp(root, tmp_path, python_env):
    import subprocess
    import stint.dcp
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
    from util import assert_same_tree
    warnings.simplefilter("ignore")
    state = {"model": {"w": torch.randn(4, 3), "b": torch.arange(3, dtype=torch.int64)},
             "meta": {"epoch": 5, "tag": "x"}}
    dcp.save(state, storage_writer=stint.dcp.StorageWriter(root))
    dcp.save({"model": {"w": torch.zeros(4, 3), "b": torch.zeros(3, dtype=torch.int64)},
              "meta": {"epoch": 6, "tag": "y"}}, storage_writer=stint.dcp.StorageWriter(root))

    def export(*args):
        return subprocess.run([sys.executable, "-m", "stint.export"] + list(args),
                              env=python_env, capture_output=True, text=True, timeout=120)

    pt = str(tmp_path / "out.pt")
    done = export("--format", "torch", "--step", "0", root, pt)
    assert done.returncode == 0, done.stderr
    assert_same_tree(torch.load(pt, weights_only=False), state)

    out_dir = str(tmp_path / "dcp-out")
    done = export("--format", "dcp", "--step", "0", root, out_dir)
    assert done.returncode == 0, done.stderr
    loaded = {"model": {"w": torch.ones(4, 3), "b": torch.ones(3, dtype=torch.int64)},
              "meta": {"epoch": 0, "tag": ""}}
    dcp.load(loaded, checkpoint_id=out_dir)
    assert_same_tree(loaded, state)
    dcp_to_torch_save(out_dir, str(tmp_path / "via-dcp.pt"))
    assert_same_tree(torch.load(str(tmp_path / "via-dcp.pt"), weights_only=False), state)

    # Without --step: the newest; a root without checkpoints: one clear line, exit 1.
    done = export("--format", "torch", root, pt)
    assert done.returncode == 0, done.stderr
    assert torch.load(pt, weights_only=False)["meta"]["epoch"] == 6
    done = export("--format", "torch", str(tmp_path / "nothing"), pt)
    assert done.returncode == 1 and "no committed checkpoint" in done.stderr, done.stderr


if __name__ == "__main__":
    import faulthandler
    faulthandler.dump_traceback_later(float(os.environ["DCP_STACKS_AFTER"]), exit=True)
    from util import run_and_exit
    run_and_exit(_worker, sys.argv[1])
