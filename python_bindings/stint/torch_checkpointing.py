"""A torch_checkpointing Storage backed by stint: each torch_checkpointing
checkpoint is one stint step, committed atomically and read back verified.

    from torch_checkpointing import CheckpointManager
    from stint.torch_checkpointing import StorageConfig

    cfg = CheckpointManager.Config(storage_config=StorageConfig("/nvme/ckpt/job-42"))
    manager = CheckpointManager(cfg)
    manager.save("/nvme/ckpt/job-42/step-100", {"model": model.state_dict(), "step": 100})
    manager.load("/nvme/ckpt/job-42/step-100", into={"model": model.state_dict()})

torch_checkpointing writes a checkpoint's files (torch.save'd items, JSON,
its metadata) into a temporary directory `<root>/tmp_<name>` and commits it
with one rename onto `<root>/<name>`, from its background process when the
save is asynchronous. This Storage keeps the files of a temporary directory
in memory and turns that rename into a stint save of step N (the digits that
end <name>: "step-100", "step_000100", "ckpt100"), each file a uint8 tensor
written with stint's engine (io_uring, O_DIRECT, checksums) and committed
atomically (manifest, rename, directory fsync, LATEST); the rename returns
once the step is durable. A crash before it leaves no trace of the step.
Reads of `<root>/<name>/<file>` read that file's tensor from the newest
committed step N and verify its checksums (a damaged one raises
stint.DataLossError, an OSError). The root lists the committed steps as
"step-<N>"; any spelling of N names the same step. Paths outside the root
go to torch_checkpointing's local filesystem storage.

Retention is stint's (keep_last, keep_every in StorageConfig.options):
deleting a committed step's files or directory raises UnimplementedError.
One process writes a root (stint's writer lock): in a job of several ranks
only rank 0 renames, so the other ranks' files would be lost; the Storage
refuses to be made where the launcher says WORLD_SIZE > 1.
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import re
import threading
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import torch
from torch_checkpointing.storage.base_storage import ReadArgs
from torch_checkpointing.storage.base_storage import Storage as _Storage
from torch_checkpointing.storage.base_storage import StorageConfig as _StorageConfig
from torch_checkpointing.storage.filesystem import LocalFileSystemStorageConfig

from . import _C
from .checkpointer import Checkpointer, CheckpointReader

INDEX_BLOB = "index"  # JSON {relative path: [tensor index, size]}
_STEP_NAME = re.compile(r"(\d+)$")


def latest_checkpoint(root: Any) -> Optional[str]:
    """"<root>/step-<N>" of the newest committed step under `root`, or None:
    what a resumed run passes to CheckpointManager.load()."""
    root = os.path.abspath(os.fspath(root))
    if not os.path.isdir(root):
        return None
    with Checkpointer(root, read_only=True, collective=False) as c:
        step = c.latest_step()
    return None if step is None else os.path.join(root, "step-%d" % step)


class _FileStream(io.RawIOBase):
    """A committed file read in order, whole at the first read.

    Not seekable: a stint file is read (and verified) whole, so a stream that
    seeks to a range would read the whole file for it. torch_checkpointing
    reads with one stream (Storage.mmap_fill_workers), and falls back to one
    for a stream that cannot seek."""

    def __init__(self, load: Any) -> None:
        super().__init__()
        self._load = load
        self._data: Optional[memoryview] = None
        self._pos = 0

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        if self._data is None:
            self._data = self._load()
        n = min(len(b), len(self._data) - self._pos)
        memoryview(b).cast("B")[:n] = self._data[self._pos:self._pos + n]
        self._pos += n
        return n


@dataclasses.dataclass
class StorageConfig(_StorageConfig):
    """root: the stint checkpoint root; options: stint.Checkpointer's keyword
    arguments for the writer (keep_last, compress, ...); temp_dir_prefix:
    torch_checkpointing's CheckpointWriterConfig.temp_dir_prefix."""

    root: str = ""
    options: Dict[str, Any] = dataclasses.field(default_factory=dict)
    temp_dir_prefix: str = "tmp_"

    def create_storage(self) -> "Storage":
        return Storage(self)


class _PendingFile(io.RawIOBase):
    """A file of a temporary directory being written: kept in memory until
    close() hands it to the Storage."""

    def __init__(self, storage: "Storage", path: Path) -> None:
        super().__init__()
        self._storage, self._path, self._buf = storage, path, bytearray()

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        mv = memoryview(data).cast("B")
        self._buf += mv
        return mv.nbytes

    def close(self) -> None:
        if not self.closed:
            self._storage._put(self._path, self._buf)
        super().close()


class Storage(_Storage):
    """torch_checkpointing Storage on a stint root (see the module doc).
    Thread-safe: torch_checkpointing writes files from a thread pool."""

    def __init__(self, config: StorageConfig) -> None:
        if not config.root:
            raise _C.InvalidArgumentError("stint.torch_checkpointing.StorageConfig needs root=")
        env = _C.launch_env()
        if env["world_size"] > 1:
            raise _C.UnimplementedError(
                "stint.torch_checkpointing.Storage writes one process's checkpoints; the launcher "
                "says WORLD_SIZE=%d (use stint.dcp or stint.Checkpointer for several ranks)"
                % env["world_size"])
        self._root = os.path.abspath(config.root)
        self._options = dict(config.options)
        self._prefix = config.temp_dir_prefix
        self._local = LocalFileSystemStorageConfig(use_direct_io=False).create_storage()
        self._mu = threading.Lock()
        self._pending: Dict[str, Dict[str, bytearray]] = {}  # temporary dir -> {relpath: bytes}
        self._writer: Optional[Checkpointer] = None
        self._readers: Dict[int, Tuple[CheckpointReader, Dict[str, List[int]]]] = {}

    # -- paths --------------------------------------------------------------------

    def _split(self, path: Any) -> Optional[Tuple[str, str]]:
        """(name under the root, relative path inside it) or None outside the root."""
        p = os.path.abspath(os.fspath(path))
        if p == self._root:
            return "", ""
        if not p.startswith(self._root + os.sep):
            return None
        rest = p[len(self._root) + 1:]
        name, _, rel = rest.partition(os.sep)
        return name, rel

    @staticmethod
    def _step(name: str) -> Optional[int]:
        m = _STEP_NAME.search(name)
        return int(m.group(1)) if m else None

    def _committed(self) -> List[int]:
        if self._writer is not None:
            return self._writer.list_committed()
        if not os.path.isdir(self._root):
            return []
        with Checkpointer(self._root, read_only=True, collective=False) as c:
            return c.list_committed()

    def _reader(self, step: int) -> Tuple[CheckpointReader, Dict[str, List[int]]]:
        with self._mu:
            got = self._readers.get(step)
        if got is None:
            reader = CheckpointReader(os.path.join(self._root, "step-%08d" % step))
            got = (reader, json.loads(reader.read_blob(INDEX_BLOB)))
            with self._mu:
                self._readers[step] = got
        return got

    def _committed_step(self, name: str) -> Optional[int]:
        step = self._step(name)
        if step is None or name.startswith(self._prefix):
            return None
        with self._mu:
            if step in self._readers:
                # Opened, so committed: a load reads one file after another,
                # and a listing opens a Checkpointer each time.
                return step
        return step if step in self._committed() else None

    # -- writing ------------------------------------------------------------------

    def _put(self, path: Any, data: Any) -> None:
        where = self._split(path)
        if where is None:
            self._local.write(Path(path), data)
            return
        name, rel = where
        if not name.startswith(self._prefix) or not rel:
            raise _C.FailedPreconditionError(
                "%s: stint.torch_checkpointing writes only into a temporary checkpoint directory "
                "(<root>/%s<name>/...), committed by the rename onto <root>/<name> "
                "(CheckpointWriterConfig(write_to_temp_dir=True), the default)"
                % (path, self._prefix))
        with self._mu:
            self._pending.setdefault(name, {})[rel] = (
                data if isinstance(data, bytearray) else bytearray(memoryview(data).cast("B")))

    def stream_write(self, path: Path) -> io.IOBase:
        if self._split(path) is None:
            return self._local.stream_write(path)
        return _PendingFile(self, Path(path))

    def write(self, path: Path, data: Any) -> None:
        self._put(path, data)

    def mkdir(self, path: Path, recursive: bool = True) -> None:
        where = self._split(path)
        if where is None:
            return self._local.mkdir(path, recursive)
        name, _ = where
        if name.startswith(self._prefix):
            with self._mu:
                self._pending.setdefault(name, {})
        elif name:
            raise _C.FailedPreconditionError(
                "%s: a directory under a stint root is a temporary checkpoint directory (%s<name>)"
                % (path, self._prefix))

    def rename(self, src_path: Path, dst_path: Path, is_directory: bool = False,
               background_cleanup: bool = False) -> None:
        """The commit: saves the temporary directory's files as step N of
        <root>/<name> and returns once it is durable. FileExistsError if step
        N is committed already (a rename never replaces a checkpoint)."""
        src, dst = self._split(src_path), self._split(dst_path)
        if src is None and dst is None:
            return self._local.rename(src_path, dst_path, is_directory, background_cleanup)
        if src is None or dst is None or src[1] or dst[1] or src[0] not in self._pending:
            raise _C.FailedPreconditionError(
                "stint.torch_checkpointing renames only a temporary checkpoint directory onto "
                "<root>/<name>, got %s -> %s" % (src_path, dst_path))
        step = self._step(dst[0])
        if step is None or dst[0].startswith(self._prefix):
            raise _C.InvalidArgumentError(
                "%s: a checkpoint under a stint root is named by its step: a name ending in "
                "digits, e.g. step-100" % dst_path)
        if self._writer is None:
            self._writer = Checkpointer(self._root, collective=False, **self._options)
        if step in self._writer.list_committed():
            raise FileExistsError("%s: step %d is committed already" % (dst_path, step))
        with self._mu:
            files = self._pending.pop(src[0])
        rels = sorted(files)
        index = {rel: [i, len(files[rel])] for i, rel in enumerate(rels)}
        tensors = [torch.frombuffer(files[rel], dtype=torch.uint8) if files[rel]
                   else torch.zeros(0, dtype=torch.uint8) for rel in rels]
        state = {INDEX_BLOB: json.dumps(index, sort_keys=True).encode(), "files": tensors}
        self._writer.save(step, state).durable.result()

    # -- reading ------------------------------------------------------------------

    def _file(self, path: Any) -> Tuple[CheckpointReader, str, int]:
        """(reader, tensor name, size) of a committed file; FileNotFoundError."""
        where = self._split(path)
        if where is not None and where[1]:
            step = self._committed_step(where[0])
            if step is not None:
                reader, index = self._reader(step)
                entry = index.get(where[1])
                if entry is not None:
                    return reader, "files.%d" % entry[0], entry[1]
        raise FileNotFoundError(2, "No such checkpoint file", str(path))

    @property
    def mmap_fill_workers(self) -> int:
        # A stint file is read (and verified) whole: ranged reads of it in
        # parallel would each read all of it. One stream, read in order.
        return 1

    @staticmethod
    def _file_bytes(found: Tuple[CheckpointReader, str, int]) -> memoryview:
        """The bytes of a file _file() found, every chunk verified (no copy of the tensor read)."""
        reader, name, size = found
        if size == 0:
            return memoryview(b"")
        return memoryview(reader.read([name])[name].numpy()).cast("B")

    def read(self, path: Path, read_args: Optional[ReadArgs] = None) -> bytes:
        if self._split(path) is None:
            return self._local.read(path, read_args)
        return bytes(self._file_bytes(self._file(path)))

    def stream_read(self, path: Path, read_args: Optional[ReadArgs] = None) -> io.RawIOBase:
        if self._split(path) is None:
            return self._local.stream_read(path, read_args)
        found = self._file(path)  # FileNotFoundError now, not at the first read
        return _FileStream(lambda: self._file_bytes(found))

    def getsize(self, path: Path) -> int:
        if self._split(path) is None:
            return self._local.getsize(path)
        return self._file(path)[2]

    def exists(self, path: Path) -> bool:
        where = self._split(path)
        if where is None:
            return self._local.exists(path)
        name, rel = where
        if not name:
            return os.path.isdir(self._root)
        with self._mu:
            pending = self._pending.get(name)
            if pending is not None:
                return not rel or rel in pending or any(r.startswith(rel + "/") for r in pending)
        step = self._committed_step(name)
        if step is None:
            return False
        if not rel:
            return True
        index = self._reader(step)[1]
        return rel in index or any(r.startswith(rel + "/") for r in index)

    def isdir(self, path: Path) -> bool:
        where = self._split(path)
        if where is None:
            return self._local.isdir(path)
        name, rel = where
        if not self.exists(path):
            return False
        if not name or not rel:
            return True
        with self._mu:
            files = self._pending.get(name)
        if files is None:
            files = self._reader(self._committed_step(name) or 0)[1]  # type: ignore[assignment]
        return rel not in files

    def ls(self, path: Path) -> List[str]:
        where = self._split(path)
        if where is None:
            return self._local.ls(path)
        name, rel = where
        if not name:
            with self._mu:
                pending = sorted(self._pending)
            return pending + ["step-%d" % s for s in self._committed()]
        if not self.isdir(path):
            raise NotADirectoryError(20, "Not a directory", str(path))
        with self._mu:
            files = self._pending.get(name)
        if files is None:
            files = self._reader(self._committed_step(name) or 0)[1]  # type: ignore[assignment]
        prefix = rel + "/" if rel else ""
        return sorted({r[len(prefix):].split("/")[0] for r in files if r.startswith(prefix)})

    # -- removing -----------------------------------------------------------------

    def delete(self, path: Path) -> None:
        where = self._split(path)
        if where is None:
            return self._local.delete(path)
        name, rel = where
        with self._mu:
            if name in self._pending and rel in self._pending[name]:
                del self._pending[name][rel]
                return
        raise _C.UnimplementedError("%s: a committed stint step is immutable; stint's keep_last "
                                    "and keep_every decide which steps stay" % path)

    def rmdir(self, path: Path) -> None:
        where = self._split(path)
        if where is None:
            return self._local.rmdir(path)
        with self._mu:
            if where[0] in self._pending and not where[1]:
                del self._pending[where[0]]
                return
        raise _C.UnimplementedError("%s: a committed stint step is immutable; stint's keep_last "
                                    "and keep_every decide which steps stay" % path)

    def remap_path(self, path: Path) -> str:
        return str(path)

    def close(self) -> None:
        """Closes the writer (waits for nothing: every rename waited already)."""
        if self._writer is not None:
            self._writer.close()
            self._writer = None
