"""Small C++ helpers for the per-call path, built on the user's machine on first use.

Why build here rather than ship binaries: a helper that reads a ``TensorImpl`` must match the torch
build it runs with, and torch.compile on CPU already needs a C++ compiler (Inductor, fxvino's
fallback, compiles C++ at run time). Each helper is one ``.cpp`` file beside this module, using
only the Python C API and c10 headers, so a build takes seconds. It is cached per user under
``$XDG_CACHE_HOME/fxvino/native`` (default ``~/.cache``), keyed by the source, torch, Python and
the compiler, and written to a temporary name then renamed, so concurrent processes never see a
half-written file.

When a helper cannot be built (no compiler, an unsupported platform) or ``FXVINO_NATIVE=0`` is
set, :func:`load` returns None and the caller uses its Python path; the reason is logged once.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import logging
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from pathlib import Path
from types import ModuleType

import torch

from fxvino.options import default_cache_dir

logger = logging.getLogger("fxvino")

SOURCES = Path(__file__).parent
BUILD_TIMEOUT_S = 300
_lock = threading.Lock()  # one build per helper at a time within a process


class BuildError(RuntimeError):
    """A helper could not be built; the message says what to install or set."""


def default_directory() -> Path:
    return default_cache_dir() / "native"


@functools.cache
def load(name: str) -> ModuleType | None:
    """The built helper ``name`` (``name.cpp`` beside this module), or None when it is
    unavailable; built once per machine and torch version."""
    if os.environ.get("FXVINO_NATIVE", "1") == "0":
        logger.info("fxvino: FXVINO_NATIVE=0: not using the native helper %s", name)
        return None
    try:
        with _lock:
            return import_built(name, build(name, default_directory()))
    except (BuildError, OSError, ImportError) as e:
        logger.warning(
            "fxvino: the native helper %s is unavailable (%s); using its Python path instead. "
            "Set FXVINO_NATIVE=0 to skip the attempt.",
            name,
            e,
        )
        return None


def build(name: str, directory: Path) -> Path:
    """Path of the shared library of helper ``name`` in ``directory``, compiled if not there yet."""
    source = SOURCES / f"{name}.cpp"
    if not source.is_file():
        raise BuildError(f"no source {source.name} in {SOURCES}; available: {', '.join(available())}")
    compiler = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")
    if compiler is None:
        raise BuildError("no C++ compiler found (install g++ or set CXX)")
    if sys.platform not in ("linux", "darwin"):
        raise BuildError(f"building native helpers is not supported on {sys.platform}")
    command = _command(compiler, source)
    key = hashlib.sha256("\0".join([source.read_text(), *command, torch.__version__, sys.version]).encode())
    target = directory / f"{name}-{key.hexdigest()[:16]}{sysconfig.get_config_var('EXT_SUFFIX')}"
    if target.is_file():
        return target
    directory.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{name}-", suffix=".so", dir=directory)
    os.close(fd)
    logger.info("fxvino: building the native helper %s (once per machine and torch version)", name)
    start = time.perf_counter()
    try:
        done = subprocess.run(
            [*command, "-o", tmp], capture_output=True, text=True, timeout=BUILD_TIMEOUT_S, check=False
        )
        if done.returncode != 0:
            tail = (done.stderr or done.stdout).strip().splitlines()[-5:]
            raise BuildError(f"{Path(compiler).name} failed with exit code {done.returncode}: " + " | ".join(tail))
        os.replace(tmp, target)
    except subprocess.TimeoutExpired as e:
        raise BuildError(f"{Path(compiler).name} took more than {BUILD_TIMEOUT_S} s") from e
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    logger.info("fxvino: built %s in %.1f s: %s", name, time.perf_counter() - start, target)
    return target


def import_built(name: str, path: Path) -> ModuleType:
    """Import the extension module at ``path`` (its init function is ``PyInit_<name>``)."""
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def available() -> list[str]:
    return sorted(p.stem for p in SOURCES.glob("*.cpp"))


def _command(compiler: str, source: Path) -> list[str]:
    root = Path(torch.__file__).parent
    command = [
        compiler,
        "-O2",
        "-std=c++20",
        "-shared",
        "-fPIC",
        "-fvisibility=hidden",
        f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}",
        f"-I{root / 'include'}",
        f"-I{sysconfig.get_paths()['include']}",
        str(source),
        f"-L{root / 'lib'}",
        "-lc10",
        f"-Wl,-rpath,{root / 'lib'}",
    ]
    if sys.platform == "darwin":  # Python's symbols come from the interpreter that loads the module
        command[1:1] = ["-undefined", "dynamic_lookup"]
    return command
