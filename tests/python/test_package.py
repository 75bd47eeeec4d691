"""The package itself: one version number (CMakeLists.txt's project() line,
stint.__version__, stint._C.__version__, the manifest's writer), the type
stubs beside the module, and Checkpointer's explicit keyword options."""

import inspect
import json
import os
import re

import pytest
import torch

import stint

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _cmake_version():
    with open(os.path.join(REPO, "CMakeLists.txt")) as f:
        m = re.search(r"project\(\s*stint\s+VERSION\s+([0-9]+\.[0-9]+\.[0-9]+)", f.read())
    assert m, "no project(stint VERSION x.y.z) in CMakeLists.txt"
    return m.group(1)


def test_one_version_everywhere(root):
    assert stint.__version__ == stint._C.__version__ == _cmake_version()
    with stint.Checkpointer(root) as ckpt:
        ckpt.save(3, {"w": torch.ones(2)}).durable.result(60)
    with open(os.path.join(root, "step-00000003", "MANIFEST.json")) as f:
        body = json.load(f)["manifest"]
    assert body["writer"] == "stint " + stint.__version__
    assert body["version"] == [1, 1]  # 1.1: referenced chunks; the writer field changed nothing


def test_stubs_and_py_typed_sit_beside_the_module():
    pkg = os.path.dirname(stint.__file__)
    assert os.path.exists(os.path.join(pkg, "py.typed"))
    assert os.path.exists(os.path.join(pkg, "_C.pyi"))


def test_stubs_name_what_the_module_has():
    with open(os.path.join(os.path.dirname(stint.__file__), "_C.pyi")) as f:
        stub = f.read()
    declared = set(re.findall(r"^(?:class|def) ([A-Za-z_][A-Za-z0-9_]*)", stub, re.M))
    declared |= set(re.findall(r"^([A-Za-z_][A-Za-z0-9_]*)\s*:", stub, re.M))
    public = {n for n in dir(stint._C) if not n.startswith("_")} | {"__version__"}
    assert public - declared == set(), "in stint._C but not in _C.pyi"
    assert {n for n in declared if not n.startswith("_")} - public == set(), "in _C.pyi only"


# Every option stint.Checkpointer accepted as **options before, with the
# C++ binding's default (python_bindings/checkpointer_binding.cc).
_OPTIONS = {
    "job_id": "", "fencing_token": 0, "chunk_size": 8 << 20, "compress": False, "zstd_level": 1,
    "staging_bytes": 0, "staging_max_bytes": 0, "busy_policy": "block", "block_timeout": 600.0,
    "copy_timeout": 600.0, "keep_last": 3,
    "keep_every": 0, "io_engine": "auto", "direct_io": True, "io_queue_depth": 32,
    "io_size": 4 << 20, "threads": 0, "process_group": None, "collective": None,
    "commit_timeout": 0.0, "snapshot": "auto", "cuda": None, "incremental": False,
    "read_only": False, "lock_wait": 0.0, "fencing": True,
    "node_id": "", "peer_replicas": 0, "peer_replica_dir": "",
    "replica_root": "", "replica_keep_last": 3, "replica_keep_every": 0,
}


def test_checkpointer_options_are_explicit_keywords_with_the_binding_defaults():
    params = inspect.signature(stint.Checkpointer).parameters
    assert list(params)[0] == "root"
    options = {n: p for n, p in params.items() if n != "root"}
    assert set(options) == set(_OPTIONS)
    for name, p in options.items():
        assert p.kind is inspect.Parameter.KEYWORD_ONLY, name
        assert p.default == _OPTIONS[name] and type(p.default) is type(_OPTIONS[name]), name


def test_checkpointer_passes_every_option_through(root):
    given = dict(_OPTIONS, job_id="job-9", fencing_token=4, chunk_size=1 << 20, compress=True,
                 zstd_level=3, keep_last=1, io_engine="posix", direct_io=False, threads=1)
    with stint.Checkpointer(root, **given) as ckpt:
        ckpt.save(1, {"w": torch.arange(10.0)}).durable.result(60)
    reader = stint.CheckpointReader(os.path.join(root, "step-00000001"))
    assert reader.job_id == "job-9"
    with open(os.path.join(root, "step-00000001", "MANIFEST.json")) as f:
        body = json.load(f)["manifest"]
    assert body["fencing_token"] == 4 and body["chunk_size"] == 1 << 20


def test_checkpointer_refuses_an_unknown_option(root):
    with pytest.raises(TypeError):
        stint.Checkpointer(root, keep_lst=2)
    with pytest.raises(TypeError):
        stint.Checkpointer(root, 3)  # options are keyword-only
