"""pytest setup for the stint Python bindings.

The module under test is the one ctest names in $STINT_PYTHON_PATH (the
build tree's python_bindings/ folder, see python_tests.cmake). Without it
(pytest run by hand), the newest build tree under the repository that holds
a built stint/_C*.so is used, and failing that an installed `stint`.
"""

import glob
import os
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _module_path():
    path = os.environ.get("STINT_PYTHON_PATH")
    if path:
        return path
    built = glob.glob(os.path.join(REPO, "*", "python_bindings", "stint", "_C*.so"))
    if not built:
        return None
    newest = max(built, key=os.path.getmtime)
    return os.path.dirname(os.path.dirname(newest))


_path = _module_path()
if _path:
    sys.path.insert(0, _path)


def pytest_report_header(config):
    import stint
    return "stint from %s" % os.path.dirname(stint.__file__)


@pytest.fixture
def root(tmp_path):
    """A checkpoint root that does not exist yet."""
    return str(tmp_path / "ckpt")


@pytest.fixture
def python_env():
    """Environment for a child Python that must import the same stint."""
    env = dict(os.environ)
    import stint
    pkg_parent = os.path.dirname(os.path.dirname(stint.__file__))
    env["PYTHONPATH"] = pkg_parent + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("STINT_GRACE_SECONDS", None)
    return env
