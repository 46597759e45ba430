"""CPU tier: the JIT's disk and memory caches under stress and damage (cugemm8.jit).

Every test compiles tiny real kernels with NVRTC (about 0.05 s each) into a cache directory of its
own; ``CUGEMM8_CACHE_DIR`` is read by ``jit.cache_dir()`` at call time, and ``jit._memory`` (the
in-process cache) is replaced by an empty dict per test. ``compiles`` counts real NVRTC runs, which is
how a test tells a cache hit from a rebuild.
"""
import hashlib
import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path

import pytest

from cugemm8 import jit

REPO = Path(__file__).resolve().parents[2]
OPTIONS = (jit.ARCH_OPTION, "-std=c++17")   # explicit: independent of where cuda_src/ lives


def tiny_source(tag: str) -> str:
    """A small, valid kernel; ``tag`` (in a comment) makes each source, and so each key, distinct."""
    return ('extern "C" __global__ void cugemm8_jit_cache_probe(float* x, int n) {\n'
            "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
            "    if (i < n) x[i] = x[i] * 2.0f + 1.0f;\n"
            f"}}  // {tag}\n")


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A fresh cache directory (not created yet), an empty memory cache, a counter of NVRTC runs."""
    root = tmp_path / "cache"
    monkeypatch.setenv("CUGEMM8_CACHE_DIR", str(root))
    monkeypatch.delenv("CUGEMM8_JIT_DISABLE_CACHE", raising=False)
    monkeypatch.setattr(jit, "_memory", {})
    monkeypatch.setattr(jit, "_warned_dirs", set())
    compiles = []
    real = jit.compile_cubin

    def counting(source, **kwargs):
        compiles.append(source)
        return real(source, **kwargs)

    monkeypatch.setattr(jit, "compile_cubin", counting)
    return root, compiles


def entry(root: Path, source: str, options=OPTIONS, patch_version: str = "") -> Path:
    return root / f"{jit.cache_key(source, tuple(options), patch_version)}.cubin"


def leftovers(root: Path) -> list[str]:
    return sorted(p.name for p in files(root) if not p.name.endswith(".cubin") or p.name.startswith("."))


def files(root: Path) -> list[Path]:
    """The cache directory's entries, without the compile locks' folder."""
    return [p for p in root.iterdir() if p.name != jit.LOCK_DIR]


# ----------------------------------------------------------------------------- many processes at once
CHILD = textwrap.dedent("""
    import hashlib, json, os, sys, time, warnings
    warnings.simplefilter("error")          # any warning (e.g. 'cache not writable') fails the child
    from cugemm8 import jit
    ready, go, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
    sources = json.loads(sys.argv[4])
    options = tuple(json.loads(sys.argv[5]))
    open(ready, "w").close()
    deadline = time.time() + 60
    while not os.path.exists(go):           # start line: every process begins at the same moment
        if time.time() > deadline:
            sys.exit("no start signal")
        time.sleep(0.002)
    seen = {}
    for r in range(rounds):
        order = sources if (os.getpid() + r) % 2 else sources[::-1]
        for src in order:
            jit._memory.clear()             # go to the disk (or compile) every time
            cubin = jit.build(src, options=options)
            key = jit.cache_key(src, options)
            digest = hashlib.sha256(cubin).hexdigest()
            if seen.setdefault(key, digest) != digest:
                sys.exit(f"key {key}: different cubins within one process")
            on_disk = jit._read_disk(jit.cache_dir() / f"{key}.cubin")
            if on_disk is None:
                sys.exit(f"key {key}: the cache file does not validate right after build()")
    print(json.dumps(seen))
""")


def test_concurrent_processes_one_valid_entry_per_key(cache, tmp_path):
    root, _ = cache
    procs_n, rounds = 10, 3
    sources = [tiny_source(f"concurrent {i} {tmp_path.name}") for i in range(3)]
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    go = tmp_path / "go"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
               CUGEMM8_CACHE_DIR=str(root))
    procs = []
    for i in range(procs_n):
        child_env = dict(env)
        if i % 2:  # half never read the disk: they compile and write every time (most write races)
            child_env["CUGEMM8_JIT_DISABLE_CACHE"] = "1"
        else:
            child_env.pop("CUGEMM8_JIT_DISABLE_CACHE", None)
        ready = tmp_path / f"ready-{i}"
        procs.append((ready, subprocess.Popen(
            [sys.executable, str(script), str(ready), str(go), str(rounds), json.dumps(sources),
             json.dumps(OPTIONS)], env=child_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)))
    deadline = time.time() + 120
    while not all(r.exists() for r, _ in procs):
        assert time.time() < deadline, "children did not start"
        assert all(p.poll() is None for _, p in procs), [p.communicate() for _, p in procs if p.poll() is not None]
        time.sleep(0.01)
    go.touch()
    results = []
    for _, p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, f"child failed (rc {p.returncode}):\n{err}"
        assert err.strip() == "", f"child wrote to stderr:\n{err}"
        results.append(json.loads(out.strip().splitlines()[-1]))

    expected = {jit.cache_key(s, OPTIONS): jit.compile_cubin(s, options=OPTIONS) for s in sources}
    for seen in results:
        assert seen == {k: hashlib.sha256(v).hexdigest() for k, v in expected.items()}
    assert sorted(p.name for p in files(root)) == sorted(f"{k}.cubin" for k in expected), \
        "exactly one file per key, no temporary files left"
    for key, cubin in expected.items():
        assert jit._read_disk(root / f"{key}.cubin") == cubin


# ----------------------------------------------------------------------------- damaged files
def _flip(blob: bytes, at: int) -> bytes:
    return blob[:at] + bytes([blob[at] ^ 0x5A]) + blob[at + 1:]


HEAD = len(jit._CACHE_MAGIC)
CORRUPTIONS = {
    "empty": lambda b: b"",
    "magic_only": lambda b: b[:HEAD],
    "truncated_digest": lambda b: b[:HEAD + 16],
    "header_only": lambda b: b[:HEAD + 32],
    "truncated_half": lambda b: b[:len(b) // 2],
    "truncated_last_byte": lambda b: b[:-1],
    "flipped_cubin_byte": lambda b: _flip(b, HEAD + 32 + (len(b) - HEAD - 32) // 3),
    "flipped_last_byte": lambda b: _flip(b, len(b) - 1),
    "flipped_digest_byte": lambda b: _flip(b, HEAD + 5),
    "wrong_magic": lambda b: _flip(b, 2),
    "trailing_garbage": lambda b: b + b"\0garbage",
    "random_same_length": lambda b: hashlib.sha256(b).digest() * (len(b) // 32 + 1),
}


@pytest.mark.parametrize("kind", sorted(CORRUPTIONS))
def test_damaged_cache_file_is_detected_and_rebuilt(cache, kind):
    root, compiles = cache
    src = tiny_source(f"damaged {kind}")
    good = jit.build(src, options=OPTIONS)
    path = entry(root, src)
    assert len(compiles) == 1 and jit._read_disk(path) == good

    jit._memory.clear()                                 # control: an intact file is used as is
    assert jit.build(src, options=OPTIONS) == good and len(compiles) == 1

    blob = path.read_bytes()
    damaged = CORRUPTIONS[kind](blob)
    assert damaged != blob
    path.write_bytes(damaged)
    assert jit._read_disk(path) is None, "the damage must be detected"
    jit._memory.clear()
    assert jit.build(src, options=OPTIONS) == good, "a damaged file must never be returned"
    assert len(compiles) == 2, "the damaged entry must be rebuilt by NVRTC"
    assert jit._read_disk(path) == good, "the rebuilt file must validate"
    assert path.read_bytes() == blob
    assert leftovers(root) == []


def test_compile_error_leaves_no_entry(cache):
    root, compiles = cache
    bad = tiny_source("syntax error") + "this is not C++;\n"
    with pytest.raises(jit.CompileError) as caught:
        jit.build(bad, options=OPTIONS)
    assert "cugemm8.cu" in str(caught.value)
    assert not jit._memory
    assert not root.exists() or files(root) == []
    good = tiny_source("after a compile error")
    assert jit.build(good, options=OPTIONS) == jit.compile_cubin(good, options=OPTIONS)
    assert sorted(p.name for p in files(root)) == [entry(root, good).name]


# ----------------------------------------------------------------------------- unwritable directories
def _chmod_is_enforced(tmp_path: Path) -> bool:
    """False when running as root (or on a file system that ignores modes): chmod 0o500 then
    does not stop writes, so the read-only cases cannot be staged."""
    probe = tmp_path / "probe"
    probe.mkdir()
    probe.chmod(0o500)
    try:
        (probe / "x").write_bytes(b"x")
    except OSError:
        return True
    finally:
        probe.chmod(0o700)
    return False


def _stage(kind: str, tmp_path: Path) -> tuple[Path, Path]:
    """(the cache directory to use, a directory that must stay as it is) for each way of failing."""
    if kind in ("read_only", "missing_under_read_only"):
        if not _chmod_is_enforced(tmp_path):
            pytest.skip("chmod does not stop writes here (running as root?)")
        ro = tmp_path / "ro"
        ro.mkdir()
        ro.chmod(0o500)
        return (ro if kind == "read_only" else ro / "sub" / "cache"), ro
    if kind == "path_is_a_file":
        f = tmp_path / "file"
        f.write_bytes(b"not a directory")
        return f, tmp_path
    if kind == "missing_under_a_file":
        f = tmp_path / "file"
        f.write_bytes(b"not a directory")
        return f / "sub" / "cache", tmp_path
    raise AssertionError(kind)


def _snapshot(where: Path) -> dict:
    return {str(p.relative_to(where)): (p.is_dir(), p.read_bytes() if p.is_file() else None)
            for p in sorted(where.rglob("*")) if os.access(p.parent, os.R_OK | os.X_OK)}


@pytest.mark.parametrize("kind", ["read_only", "missing_under_read_only", "path_is_a_file", "missing_under_a_file"])
def test_unwritable_cache_dir_falls_back_to_memory(cache, tmp_path, monkeypatch, kind):
    _, compiles = cache
    work = tmp_path / "work"
    work.mkdir()
    cache_root, frozen = _stage(kind, work)
    monkeypatch.setenv("CUGEMM8_CACHE_DIR", str(cache_root))
    before = _snapshot(frozen)
    s1, s2 = tiny_source(f"unwritable {kind} 1"), tiny_source(f"unwritable {kind} 2")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            c1 = jit.build(s1, options=OPTIONS)
            assert jit.build(s1, options=OPTIONS) is c1        # from memory: no second compile
            c2 = jit.build(s2, options=OPTIONS)
            jit._memory.clear()                               # nothing on disk: compiled again
            c1_again = jit.build(s1, options=OPTIONS)
        after = _snapshot(frozen)
    finally:
        for p in [work, *work.rglob("*")]:
            if p.is_dir():
                p.chmod(0o700)
    assert compiles == [s1, s2, s1]
    assert c1 == c1_again == jit.compile_cubin(s1, options=OPTIONS)
    assert c2 == jit.compile_cubin(s2, options=OPTIONS)
    runtime = [w for w in caught if issubclass(w.category, RuntimeWarning)]
    assert len(runtime) == 1, [str(w.message) for w in caught]
    assert len(caught) == 1, [str(w.message) for w in caught]
    msg = str(runtime[0].message)
    assert str(cache_root) in msg and "memory" in msg, msg
    assert after == before, "nothing may be created in an unwritable place"


# ----------------------------------------------------------------------------- what the key covers
@pytest.fixture
def sources_copy(tmp_path, monkeypatch):
    """jit.source_dir() pointed at a private copy of cuda_src/ (the digest is recomputed)."""
    copy = tmp_path / "cuda_src"
    shutil.copytree(jit.source_dir(), copy)
    monkeypatch.setattr(jit, "source_dir", lambda: copy)
    jit._sources_digest.cache_clear()
    yield copy
    jit._sources_digest.cache_clear()


def test_cache_key_covers_every_input(sources_copy, monkeypatch):
    src = tiny_source("key")
    base = jit.cache_key(src, OPTIONS)
    jit._sources_digest.cache_clear()
    assert jit.cache_key(src, OPTIONS) == base, "the key must be deterministic"
    keys = {"base": base}

    keys["source"] = jit.cache_key(tiny_source("key, edited comment"), OPTIONS)
    keys["options_added"] = jit.cache_key(src, OPTIONS + ("-lineinfo",))
    keys["options_changed"] = jit.cache_key(src, (jit.ARCH_OPTION, "-std=c++20"))
    keys["options_reordered"] = jit.cache_key(src, OPTIONS[::-1])
    keys["patch_version"] = jit.cache_key(src, OPTIONS, "ffma-interleave-1")
    keys["patch_version_2"] = jit.cache_key(src, OPTIONS, "ffma-interleave-2")

    with monkeypatch.context() as m:
        major, minor = jit.nvrtc_version()
        m.setattr(jit, "nvrtc_version", lambda: (major, minor + 1))
        keys["nvrtc_minor"] = jit.cache_key(src, OPTIONS)
        m.setattr(jit, "nvrtc_version", lambda: (major + 1, minor))
        keys["nvrtc_major"] = jit.cache_key(src, OPTIONS)
    assert jit.cache_key(src, OPTIONS) == base

    def changed_tree(label, edit):
        edit()
        jit._sources_digest.cache_clear()
        keys[label] = jit.cache_key(src, OPTIONS)

    gemm = sources_copy / "gemm" / "mainloop.cuh"
    original = gemm.read_bytes()
    changed_tree("cuda_src_edit", lambda: gemm.write_bytes(original + b"\n// one more line\n"))
    changed_tree("cuda_src_one_byte", lambda: gemm.write_bytes(original[:-1] + bytes([original[-1] ^ 1])))
    gemm.write_bytes(original)
    jit._sources_digest.cache_clear()
    assert jit.cache_key(src, OPTIONS) == base, "restoring the file must restore the key"
    changed_tree("cuda_src_new_file", lambda: (sources_copy / "extra.cuh").write_text("// new\n"))
    (sources_copy / "extra.cuh").unlink()
    changed_tree("cuda_src_new_subdir_file",
                 lambda: ((sources_copy / "detail").mkdir(), (sources_copy / "detail" / "x.cuh").write_text("//\n")))
    shutil.rmtree(sources_copy / "detail")
    ptx = sources_copy / "ptx" / "tma.cuh"
    changed_tree("cuda_src_rename", lambda: ptx.rename(sources_copy / "ptx" / "tma2.cuh"))

    assert len(set(keys.values())) == len(keys), {k: v for k, v in keys.items()
                                                  if list(keys.values()).count(v) > 1}


def test_key_change_forces_rebuild_end_to_end(cache, sources_copy, monkeypatch):
    """A changed NVRTC version, patcher version or cuda_src/ file must not reuse the old disk entry."""
    root, compiles = cache
    src = tiny_source("end to end")
    plain = jit.build(src, options=OPTIONS)
    assert len(compiles) == 1

    def rebuilt(**kwargs) -> bytes:
        jit._memory.clear()
        n = len(compiles)
        out = jit.build(src, options=OPTIONS, **kwargs)
        assert len(compiles) == n + 1, f"{kwargs or 'change'}: the old entry was reused"
        return out

    jit._memory.clear()
    assert jit.build(src, options=OPTIONS) == plain and len(compiles) == 1  # control: reused

    patched = rebuilt(patch=lambda c: c + b"PATCHED", patch_version="test-patch-1")
    assert patched == plain + b"PATCHED"
    jit._memory.clear()
    assert jit.build(src, options=OPTIONS) == plain, "an unpatched build must not see the patched entry"
    jit._memory.clear()
    assert jit.build(src, options=OPTIONS, patch=lambda c: c + b"X", patch_version="test-patch-1") == patched
    rebuilt(patch=lambda c: c + b"PATCHED2", patch_version="test-patch-2")

    with monkeypatch.context() as m:
        m.setattr(jit, "nvrtc_version", lambda: (99, 9))
        assert rebuilt() == plain

    gemm = sources_copy / "gemm" / "mainloop.cuh"
    gemm.write_bytes(gemm.read_bytes() + b"\n// edited\n")
    jit._sources_digest.cache_clear()
    assert rebuilt() == plain
    assert len(list(root.glob("*.cubin"))) == 5 and leftovers(root) == []


# ----------------------------------------------------------------------------- ranks that start together
RANK = textwrap.dedent("""
    import logging, os, sys, time
    from cugemm8 import jit
    logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(message)s")
    ready, go, source = sys.argv[1], sys.argv[2], sys.argv[3]
    open(ready, "w").close()
    while not os.path.exists(go):
        time.sleep(0.002)
    jit.build(source, options=tuple(sys.argv[4:]))
""")


def test_ranks_starting_together_compile_once(cache, tmp_path):
    """Four processes ask for one kernel at the same moment: one compiles it, three load its file (the
    jit logger says which; the children's counts, not timing, decide)."""
    root, _ = cache
    script = tmp_path / "rank.py"
    script.write_text(RANK)
    go = tmp_path / "go"
    source = tiny_source(f"ranks {tmp_path.name}")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
               CUGEMM8_CACHE_DIR=str(root))
    env.pop("CUGEMM8_JIT_DISABLE_CACHE", None)
    procs = [subprocess.Popen([sys.executable, str(script), str(tmp_path / f"ready-{i}"), str(go), source, *OPTIONS],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(4)]
    deadline = time.time() + 120
    while not all((tmp_path / f"ready-{i}").exists() for i in range(4)):
        assert time.time() < deadline and all(p.poll() is None for p in procs), "ranks did not start"
        time.sleep(0.01)
    go.touch()
    logs = [p.communicate(timeout=300)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), logs
    compiled = sum(line.startswith("compiling ") for log in logs for line in log.splitlines())
    loaded = sum(line.startswith("loaded ") for log in logs for line in log.splitlines())
    assert (compiled, loaded) == (1, 3), logs


def test_cache_files_follow_the_umask(cache):
    root, _ = cache
    jit.build(tiny_source("mode"), options=OPTIONS)
    (path,) = root.glob("*.cubin")
    assert path.stat().st_mode & 0o777 == 0o666 & ~jit._umask()


@pytest.mark.parametrize("value, on", [("1", True), ("yes", True), ("0", False), ("", False), ("off", False),
                                       ("False", False), ("NO", False)])
def test_disable_cache_flag_reads_zero_as_off(cache, monkeypatch, value, on):
    root, compiles = cache
    source = tiny_source("flag")
    jit.build(source, options=OPTIONS)
    jit._memory.clear()
    monkeypatch.setenv("CUGEMM8_JIT_DISABLE_CACHE", value)
    jit.build(source, options=OPTIONS)
    assert len(compiles) == (2 if on else 1)
