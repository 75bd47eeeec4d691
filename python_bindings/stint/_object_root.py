"""Roots in an object store ("s3://bucket/prefix") for stint.dcp: telling
them apart, listing their committed steps, and the local directory a writer
stages its saves in before they are uploaded (a Checkpointer saves to a
local root, with the store as its replica_root)."""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
from typing import List, Optional

from . import _C

SCHEME = "s3://"


def is_object_root(path: str) -> bool:
    return isinstance(path, str) and path.startswith(SCHEME)


def committed_steps(url: str) -> List[int]:
    """The steps committed under the store root `url`, oldest first ([] when none)."""
    try:
        ckpt = _C.Checkpointer(url, read_only=True)
    except _C.NotFoundError:
        return []
    try:
        return list(ckpt.list_committed())
    finally:
        ckpt.close()


def staging_dir(url: str, local_dir: Optional[str] = None) -> str:
    """Where saves to `url` are staged: `local_dir` when given, else a
    directory keyed by the URL under $STINT_LOCAL_ROOT, else under the
    system's temporary directory. Every rank of a job must see the same one
    (a node-local disk serves a job on one node)."""
    if local_dir:
        return os.fspath(local_dir)
    base = os.environ.get("STINT_LOCAL_ROOT") or os.path.join(tempfile.gettempdir(), "stint-dcp")
    readable = re.sub(r"[^A-Za-z0-9._-]+", "_", url[len(SCHEME):]).strip("_")[:80]
    digest = hashlib.sha256(url.rstrip("/").encode()).hexdigest()[:12]
    return os.path.join(base, "%s-%s" % (readable, digest))
