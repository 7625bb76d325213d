"""The wheel carries its own libwspager, built from this clone's sources.

``pip install ./python`` (or ``pip wheel ./python``) runs the project's own
build: ``./configure`` (with CUDA where the toolkit is found, the host
backend otherwise) and ``make libwspager.la`` in ``build-python/`` at the
top of the clone, reused by later builds.  The library goes into the
package as ``wspager/_native/libwspager.so``, with the shared libraries it
needs that a machine without the build dependencies may lack (liburing,
zstd, jansson, xxHash), as wheels with native code do; ``wspager._lib``
loads them from there.  WSPAGER_LIBRARY still overrides, at run time.
"""
import os
import shutil
import subprocess
import sys

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

try:
    from setuptools.command.bdist_wheel import bdist_wheel
except ImportError:   # setuptools before 70.1
    from wheel.bdist_wheel import bdist_wheel

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(HERE)
# What the library links that a machine without its build dependencies lacks.
BUNDLED = ("liburing", "libzstd", "libjansson", "libxxhash")


def _run(cmd, cwd):
    print("wspager:", " ".join(cmd), flush=True)
    try:
        subprocess.run(cmd, cwd=cwd, check=True)
    except FileNotFoundError as e:
        sys.exit(f"wspager: cannot run {cmd[0]} ({e}); building the library needs the project's "
                 "build dependencies (scripts/deps.sh installs them)")
    except subprocess.CalledProcessError as e:
        sys.exit(f"wspager: {' '.join(cmd)} failed (exit {e.returncode}) in {cwd}")


def build_library() -> str:
    """Build libwspager.so from the clone; its path."""
    if not os.path.exists(os.path.join(TOP, "configure.ac")):
        sys.exit(f"wspager: no configure.ac in {TOP}: the package builds its library from a "
                 "clone of the repository (pip install ./python from the clone)")
    if not os.path.exists(os.path.join(TOP, "configure")):
        _run(["sh", "./autogen.sh"], TOP)
    build = os.path.join(TOP, "build-python")
    os.makedirs(build, exist_ok=True)
    if not os.path.exists(os.path.join(build, "Makefile")):
        _run([os.path.join(TOP, "configure"), "-q", "--disable-static"], build)
    _run(["make", f"-j{os.cpu_count() or 1}", "libwspager.la"], build)
    return os.path.realpath(os.path.join(build, ".libs", "libwspager.so"))


def needed_libraries(lib: str):
    """Paths of the bundled dependencies `lib` is linked with (ldd)."""
    out = subprocess.run(["ldd", lib], capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[1] == "=>" and parts[0].startswith(BUNDLED):
            yield parts[0], parts[2]


class BuildWithLibrary(build_py):
    def run(self):
        super().run()
        lib = build_library()
        dest = os.path.join(self.build_lib, "wspager", "_native")
        shutil.rmtree(dest, ignore_errors=True)
        os.makedirs(dest)
        shutil.copyfile(lib, os.path.join(dest, "libwspager.so"))
        for soname, path in needed_libraries(lib):
            shutil.copyfile(path, os.path.join(dest, soname))


class BinaryDistribution(Distribution):
    """It holds a native library: a wheel for this platform, installed in
    platlib."""

    def has_ext_modules(self):
        return True


class PlatformWheel(bdist_wheel):
    """Tagged for any Python 3: the library is loaded with ctypes, not built
    against an ABI."""

    def get_tag(self):
        return ("py3", "none", super().get_tag()[2])


setup(cmdclass={"build_py": BuildWithLibrary, "bdist_wheel": PlatformWheel},
      distclass=BinaryDistribution)
