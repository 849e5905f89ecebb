"""Builds sluice's Python module with the project's CMake, for the Python that runs this.

    pip install --no-build-isolation .          # offline, with the machine's setuptools and pybind11
    pip wheel --no-build-isolation -w dist .    # a wheel for this machine's Python

The CMake build lives in build/python-<interpreter>, so a second install
rebuilds only what changed; SLUICE_BUILD_DIR names another, or an existing
build of the project (its other settings are kept, its library reused). It
needs nvcc (on PATH, CUDACXX, or /usr/local/cuda/bin) and builds the _sluice
target alone.
SLUICE_CMAKE_ARGS adds arguments to the configure step (for example
-DCMAKE_PREFIX_PATH=... where the header-only dependencies live), and
CMAKE_BUILD_PARALLEL_LEVEL sets the jobs.
"""
import os
import pathlib
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = pathlib.Path(__file__).resolve().parent


def project_version():
    """The one version: project(sluice VERSION x.y.z) in CMakeLists.txt."""
    match = re.search(r"project\(sluice\s+VERSION\s+([0-9][0-9.]*)", (ROOT / "CMakeLists.txt").read_text())
    if not match:
        raise RuntimeError("CMakeLists.txt names no project(sluice VERSION ...)")
    return match.group(1)


def cuda_compiler_env():
    env = dict(os.environ)
    if "CUDACXX" not in env and shutil.which("nvcc") is None:
        for candidate in sorted(pathlib.Path("/usr/local").glob("cuda*/bin/nvcc")):
            env["CUDACXX"] = str(candidate)
            break
    return env


def pybind11_args():
    try:
        import pybind11
        return [f"-Dpybind11_DIR={pybind11.get_cmake_dir()}"]
    except ImportError:  # Debian's pybind11-dev: CMake finds it by itself
        return []


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        tag = f"{sys.implementation.cache_tag}-{sysconfig.get_platform()}"
        build_dir = pathlib.Path(os.environ.get("SLUICE_BUILD_DIR", ROOT / "build" / f"python-{tag}"))
        build_dir.mkdir(parents=True, exist_ok=True)
        configure = ["cmake", "-S", str(ROOT), "-B", str(build_dir)]
        if not (build_dir / "CMakeCache.txt").exists():  # a new build: the module and the library, nothing else
            configure += [*(["-G", "Ninja"] if shutil.which("ninja") else []), "-DCMAKE_BUILD_TYPE=Release",
                          "-DSLUICE_BUILD_TESTS=OFF", "-DSLUICE_BUILD_TOOLS=OFF"]
        configure += ["-DSLUICE_BUILD_PYTHON=ON", f"-DPython_EXECUTABLE={sys.executable}", *pybind11_args(),
                      *shlex.split(os.environ.get("SLUICE_CMAKE_ARGS", ""))]
        env = cuda_compiler_env()
        subprocess.run(configure, check=True, env=env)
        jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL", str(os.cpu_count() or 2))
        subprocess.run(["cmake", "--build", str(build_dir), "--target", "_sluice", "-j", jobs], check=True, env=env)
        built = sorted((build_dir / "python" / "sluice").glob("_sluice*" + sysconfig.get_config_var("EXT_SUFFIX")))
        if not built:
            raise RuntimeError(f"the build made no _sluice module for this Python in {build_dir}/python/sluice")
        target = pathlib.Path(self.get_ext_fullpath(ext.name))
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(built[0], target)


setup(version=project_version(), ext_modules=[Extension("sluice._sluice", sources=[])],
      cmdclass={"build_ext": CMakeBuild})
