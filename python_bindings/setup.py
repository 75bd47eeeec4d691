"""Builds stint._C with the project's own CMake build, for `pip install`.

    .venv/bin/pip install --no-build-isolation ./python_bindings

Configures the repository (the folder above this one) into
python_bindings/build-pip/ (or $STINT_PIP_BUILD_DIR) against the torch and
pybind11 of the interpreter running pip, builds only the stint_python
target, and packages the module with the pure-Python files of stint/.
"""

import os
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        try:
            import pybind11
            import torch.utils
        except ImportError as e:
            raise RuntimeError(
                "building stint needs torch and pybind11 importable by %s (%s); install them first "
                "and run pip with --no-build-isolation, so the module is built against the torch "
                "it will run with" % (sys.executable, e)) from None
        build_dir = os.environ.get("STINT_PIP_BUILD_DIR", os.path.join(HERE, "build-pip"))
        config = [
            "cmake", "-S", REPO, "-B", build_dir, "-DCMAKE_BUILD_TYPE=RelWithDebInfo",
            "-DSTINT_BUILD_TESTS=OFF", "-DSTINT_BUILD_TOOLS=OFF",
            "-DPython_EXECUTABLE=" + sys.executable,
            "-DCMAKE_PREFIX_PATH=" + torch.utils.cmake_prefix_path,
            "-Dpybind11_DIR=" + pybind11.get_cmake_dir(),
        ]
        if shutil.which("ninja"):
            config += ["-G", "Ninja"]
        subprocess.check_call(config)
        jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL", str(os.cpu_count() or 1))
        subprocess.check_call(["cmake", "--build", build_dir, "--target", "stint_python",
                               "--parallel", jobs])
        pkg = os.path.join(build_dir, "python_bindings", "stint")
        built = [f for f in os.listdir(pkg) if f.startswith("_C.") and f.endswith(".so")]
        if len(built) != 1:
            raise RuntimeError("expected one stint/_C*.so in %s, found %s" % (pkg, built))
        target = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copyfile(os.path.join(pkg, built[0]), target)


setup(
    packages=["stint"],
    package_dir={"stint": os.path.join("stint")},
    ext_modules=[Extension("stint._C", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
    zip_safe=False,
)
