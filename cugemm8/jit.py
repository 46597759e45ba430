"""Run-time compilation: CUDA source -> sm_90a cubin through NVRTC, with two caches.

* memory: a dict from cache key to cubin bytes, for this process;
* disk: ``$CUGEMM8_CACHE_DIR`` (default ``~/.cache/cugemm8``), one file per key, written to a
  temporary name and renamed into place (atomic), with a SHA-256 of the cubin in its header so a
  truncated or corrupted file is detected and rebuilt. Files are created readable as the umask allows
  (0o666 & ~umask), like any other file the process writes.

Processes that start together (ranks of one server) compile each kernel once: the compile of one key runs
under an exclusive ``flock`` on ``locks/<key>.lock`` in the cache directory, and whoever takes the lock second
reads the first one's file. JIT events go to the ``cugemm8.jit`` logger.

The key covers everything that changes the binary: the rendered source, every file under
``cuda_src/``, the NVRTC options, NVRTC's version and the SASS patcher's version. Compiling needs no
GPU and no driver.
"""
from __future__ import annotations

import fcntl
import functools
import hashlib
import logging
import os
import tempfile
import threading
import time
import warnings
from contextlib import contextmanager
from pathlib import Path

from . import envvars
from .errors import CompileError

log = logging.getLogger(__name__)

ARCH_OPTION = "-arch=sm_90a"
LOCK_DIR = "locks"          # the compile locks' folder, inside the cache directory
_CACHE_MAGIC = b"CUGEMM8CUBIN1\n"


def source_dir() -> Path:
    """The folder holding the CUDA sources: inside the installed package, or the checkout's top."""
    here = Path(__file__).resolve().parent
    for candidate in (here / "cuda_src", here.parent / "cuda_src"):
        if (candidate / "fp8_gemm.cu").is_file():
            return candidate
    raise FileNotFoundError(f"cugemm8: cannot find cuda_src/ next to {here}")


@functools.lru_cache(maxsize=None)
def nvrtc_version() -> tuple[int, int]:
    from cuda.bindings import nvrtc

    err, major, minor = nvrtc.nvrtcVersion()
    _check(err, "nvrtcVersion")
    return int(major), int(minor)


@functools.lru_cache(maxsize=None)
def _sources_digest() -> str:
    """SHA-256 over every file under ``source_dir()`` (subfolders included: anything there may be
    #included), each with its relative path. Computed once per process."""
    root = source_dir()
    h = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        rel = path.relative_to(root).as_posix()
        if "__pycache__" in rel.split("/"):
            continue
        data = path.read_bytes()
        h.update(f"{rel}\0{len(data)}\0".encode())
        h.update(data)
    return h.hexdigest()


def cache_dir() -> Path:
    root = envvars.path(envvars.CACHE_DIR)
    if root:
        return Path(root)
    xdg = envvars.path("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "cugemm8"


def default_options() -> tuple[str, ...]:
    return (ARCH_OPTION, "-std=c++17", f"-I{source_dir()}", "--device-as-default-execution-space")


def cache_key(source: str, options: tuple[str, ...], patch_version: str = "") -> str:
    h = hashlib.sha256()
    for part in (source, _sources_digest(), "\0".join(options), repr(nvrtc_version()), patch_version):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()[:32]


def _check(err, what: str) -> None:
    from cuda.bindings import nvrtc

    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise CompileError(f"{what} failed: {err}")


def compile_cubin(source: str, *, name: str = "cugemm8.cu", options: tuple[str, ...] | None = None,
                  log: list | None = None) -> bytes:
    """Compile ``source`` with NVRTC (no cache). Raises CompileError with the log on failure; appends the
    log of a successful compile (its warnings, ptxas' included) to `log` if given."""
    from cuda.bindings import nvrtc

    opts = default_options() if options is None else tuple(options)
    err, prog = nvrtc.nvrtcCreateProgram(source.encode(), name.encode(), 0, [], [])
    _check(err, "nvrtcCreateProgram")
    try:
        (err,) = nvrtc.nvrtcCompileProgram(prog, len(opts), [o.encode() for o in opts])
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            raise CompileError(f"NVRTC could not compile {name}:\n{_log(prog)}")
        if log is not None:
            log.append(_log(prog))
        err, size = nvrtc.nvrtcGetCUBINSize(prog)
        _check(err, "nvrtcGetCUBINSize")
        buf = b" " * size
        (err,) = nvrtc.nvrtcGetCUBIN(prog, buf)
        _check(err, "nvrtcGetCUBIN")
        return buf
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


def _log(prog) -> str:
    from cuda.bindings import nvrtc

    err, size = nvrtc.nvrtcGetProgramLogSize(prog)
    buf = b" " * size
    nvrtc.nvrtcGetProgramLog(prog, buf)
    return buf.decode(errors="replace").rstrip("\0 \n")


# ----------------------------------------------------------------------------- caches
_memory: dict[str, bytes] = {}
_lock = threading.Lock()
_warned_dirs: set[str] = set()


def _read_disk(path: Path) -> bytes | None:
    try:
        blob = path.read_bytes()
    except OSError:
        return None
    head = len(_CACHE_MAGIC)
    if blob[:head] != _CACHE_MAGIC or len(blob) < head + 32:
        return None
    digest, cubin = blob[head:head + 32], blob[head + 32:]
    return cubin if hashlib.sha256(cubin).digest() == digest else None


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


_FILE_MODE = 0o666 & ~_umask()   # what open() would give; mkstemp's files are 0o600


def _write_disk(path: Path, cubin: bytes) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".cubin")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(_CACHE_MAGIC + hashlib.sha256(cubin).digest() + cubin)
            os.chmod(tmp, _FILE_MODE)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError as exc:
        where = str(path.parent)
        if where not in _warned_dirs:
            _warned_dirs.add(where)
            warnings.warn(f"cugemm8: JIT cache directory {where} is not writable ({exc}); "
                          "kernels are cached in memory only", RuntimeWarning, stacklevel=3)
            log.warning("JIT cache directory %s is not writable (%s); kernels are cached in memory only", where, exc)


@contextmanager
def _compile_lock(path: Path):
    """An exclusive flock on ``locks/<key>.lock`` in the cache directory, across processes; nothing if the
    directory cannot hold one (the compile then runs unlocked). Lock files stay: removing one while another
    process waits on it would let a third take a new lock beside it."""
    try:
        (path.parent / LOCK_DIR).mkdir(parents=True, exist_ok=True)
        fd = os.open(path.parent / LOCK_DIR / f"{path.stem}.lock", os.O_RDWR | os.O_CREAT, _FILE_MODE)
    except OSError:
        yield
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)   # releases the lock


def build(source: str, *, name: str = "cugemm8.cu", options: tuple[str, ...] | None = None,
          patch=None, patch_version: str = "") -> bytes:
    """Cached compile. ``patch(cubin) -> cubin`` runs after NVRTC and before the cubin is cached."""
    opts = default_options() if options is None else tuple(options)
    key = cache_key(source, opts, patch_version)
    cubin = _memory.get(key)
    if cubin is not None:
        return cubin
    with _lock:
        cubin = _memory.get(key)
        if cubin is not None:
            return cubin
        path = cache_dir() / f"{key}.cubin"
        use_disk = not envvars.flag(envvars.JIT_DISABLE_CACHE)
        cubin = _read_disk(path) if use_disk else None
        if cubin is None:
            with _compile_lock(path):
                cubin = _read_disk(path) if use_disk else None   # another process may have built it meanwhile
                if cubin is None:
                    log.info("compiling %s (key %s)", name, key)
                    start = time.perf_counter()
                    cubin = compile_cubin(source, name=name, options=opts)
                    if patch is not None:
                        cubin = patch(cubin)
                    _write_disk(path, cubin)
                    log.info("compiled %s in %.2f s: %d bytes, %s", name, time.perf_counter() - start, len(cubin),
                             path)
                else:
                    log.info("loaded %s from %s (built by another process)", name, path)
        else:
            log.info("loaded %s from %s", name, path)
        _memory[key] = cubin
        return cubin
