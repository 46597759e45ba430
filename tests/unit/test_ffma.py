"""CPU tier: cugemm8.ffma, the FFMA interleave patch: on real kernels (cuobjdump as the oracle), on
synthetic instruction words, and through the build (fp8_gemm.build: patch on and off, cache keys,
the environment switches, the settings)."""
import re
import struct

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from cugemm8 import ffma, fp8_gemm, jit, sass
from kernel_configs import OFF, ONE_WG, VARIANTS
from sass_oracle import KERNEL, compile_named, needs_tools, split_text, words_of


# ----------------------------------------------------------------------------- the patch on real kernels

@needs_tools
@pytest.mark.parametrize("name, keep_compiler_yields, must_patch",
                         [("one_wg", True, True), ("one_wg", False, True), ("two_wg", False, False)])
def test_interleave_changes_only_ffma_control_bits(cubins, listings, name, keep_compiler_yields, must_patch):
    # The two-warpgroup kernel's promotion FFMAs already carry ptxas's own yield pattern, so the rule
    # may find nothing to change there; whatever it changes must still follow the invariants below.
    cubin = cubins[name]
    patched, count = ffma.interleave(cubin, keep_compiler_yields=keep_compiler_yields)
    assert len(patched) == len(cubin) and (count > 0 or not must_patch)
    assert sass.section_headers(patched) == sass.section_headers(cubin)

    before, after = listings[name], sass.parse_listing(sass.disassemble(patched))
    assert len(after) == len(before)
    differing = 0
    for (off0, text0, lo0, hi0), (off1, text1, lo1, hi1) in zip(before, after):
        assert off0 == off1 and lo0 == lo1
        if hi0 == hi1:
            assert text0 == text1
            continue
        differing += 1
        assert sass.is_ffma_rrr(lo0, hi0), text0
        assert hi0 ^ hi1 == ffma.PATCH_MASK
        assert hi0 & sass.REUSE_B and sass.yield_bit(hi0) == 1 and sass.yield_bit(hi1) == 0
        p0, m0, ops0 = split_text(text0)
        p1, m1, ops1 = split_text(text1)
        assert (p0, m0, ops0[:2], ops0[3:]) == (p1, m1, ops1[:2], ops1[3:])
        assert ops0[2].endswith(".reuse") and ops1[2] == ops0[2][:-len(".reuse")]
    assert differing == count

    # Bytes outside the patched hi words are untouched.
    offset, _ = sass.text_sections(cubin)[KERNEL]
    diff = [i for i in range(len(cubin)) if cubin[i] != patched[i]]
    assert all((i - offset) % 16 >= 8 for i in diff)


def test_interleave_keeps_compiler_yields_and_is_idempotent(cubins):
    for cubin in cubins.values():
        words = words_of(cubin)
        patched, count = ffma.interleave(cubin)
        new_words = words_of(patched)
        for run in ffma.ffma_runs(words):
            if any(sass.yield_bit(words[i][1]) == 0 for i in run):
                assert all(new_words[i] == words[i] for i in run)
        assert ffma.interleave(patched) == (patched, 0)
        forced, forced_count = ffma.interleave(cubin, keep_compiler_yields=False)
        assert forced_count >= count
        assert ffma.interleave(forced, keep_compiler_yields=False) == (forced, 0)


def test_interleave_pattern_one_wg(cubins):
    """On a plain reuse chain the rule patches the head and then every other FFMA."""
    cubin = cubins["one_wg"]
    words = words_of(cubin)
    patched, count = ffma.interleave(cubin)
    new_words = words_of(patched)
    runs = ffma.ffma_runs(words)
    assert runs and count == sum(new != old for new, old in zip(new_words, words))
    for run in runs:
        if any(not words[i][1] & sass.YIELD_BIT for i in run):
            continue  # the compiler already yields in this run: the default patch leaves it alone
        considered = int(len(run) * 9 / 16)
        assert all(new_words[i] == words[i] for i in run[considered:])
        # Within the considered part, no two neighbours sharing Rb both keep the Rb reuse flag.
        for a, b in zip(run[:considered], run[1:considered]):
            (lo_a, hi_a), (lo_b, hi_b) = new_words[a], new_words[b]
            if sass.ffma_regs(lo_a, hi_a)[2] == sass.ffma_regs(lo_b, hi_b)[2]:
                assert not (hi_a & sass.REUSE_B and hi_b & sass.REUSE_B)


def test_interleave_refuses_a_silent_no_op(cubins, capsys):
    """Runs without yields and without any Rb reuse: promotion code the rule cannot patch."""
    cubin = bytearray(cubins["one_wg"])
    offset, _ = sass.text_sections(bytes(cubin))[KERNEL]
    words = words_of(bytes(cubin))
    for run in ffma.ffma_runs(words):
        for i in run:
            struct.pack_into("<Q", cubin, offset + 16 * i + 8, words[i][1] & ~sass.REUSE_B)
    with pytest.raises(ffma.FfmaPatchError):
        ffma.interleave(bytes(cubin))
    with pytest.raises(ValueError):
        ffma.interleave(cubins["one_wg"], fraction=0.0)
    ffma.interleave(cubins["one_wg"], verbose=True)
    assert "FFMA" in capsys.readouterr().out


# ----------------------------------------------------------------------------- synthetic words
def _runs(words):
    """Maximal runs of >= 8 consecutive FFMAs, found independently of ffma.ffma_runs."""
    flags = "".join("F" if sass.is_ffma(lo, hi) else "." for lo, hi in words)
    return [range(m.start(), m.end()) for m in re.finditer(r"F{8,}", flags)]


def test_ffma_runs():
    ffma_word, other = (sass.FFMA_RRR | 7 << 12, 0x000FE20000000000), (0x7918, 0x000FC00000000000)
    words = [ffma_word] * 7 + [other] + [ffma_word] * 8 + [other] * 2 + [ffma_word] * 9
    assert ffma.ffma_runs(words) == [range(8, 16), range(18, 27)] == _runs(words)


_NEAR_MISS_OPCODES = [0x220, 0x221, 0x222, 0x224, 0x023, 0x323, 0x2A3, 0x223, 0x423, 0x623, 0x823, 0xA23,
                      0xC23, 0xE23]


@st.composite
def non_ffma_words(draw):
    """Words that are not FFMA, many of them one bit away from one, with the patch's bits set."""
    low12 = draw(st.one_of(st.sampled_from(_NEAR_MISS_OPCODES), st.integers(0, 0xFFF)))
    lo = low12 | draw(st.integers(0, 2**52 - 1)) << 12
    hi = draw(st.integers(0, 2**64 - 1)) | sass.REUSE_B | sass.YIELD_BIT
    if sass.is_ffma(lo, hi):
        hi ^= 1 << 27          # the uniform-operand bit: FFMA forms exist with it only for 0x623, 0xA23
    if sass.is_ffma(lo, hi):
        lo ^= 1
    return lo, hi


@st.composite
def promotion_chain(draw):
    """ptxas-like promotion FFMAs sharing one Rb: ptxas flags Rb reuse on all but the last (here one
    FFMA in four gets the opposite), and a few FFMAs already yield."""
    rb, length = draw(st.integers(0, 255)), draw(st.integers(1, 12))
    no_reuse, yields = draw(st.integers(0, 2**12 - 1)), draw(st.integers(0, 2**12 - 1))
    words = []
    for j in range(length):
        rd, ra = (rb + 3 * j + 1) % 255, (rb + 5 * j + 2) % 255
        lo = sass.FFMA_RRR | 7 << 12 | rd << 16 | ra << 24 | rb << 32
        hi = rd | 0x000FE2 << 40                        # stall 1, yield off, no barriers
        flipped = no_reuse >> j & no_reuse >> (j + 1) & 1
        if (j < length - 1) != bool(flipped):
            hi |= sass.REUSE_B
        if yields >> j & yields >> (j + 4) & yields >> (j + 8) & 1:
            hi &= ~sass.YIELD_BIT
        words.append((lo, hi))
    return words


# Found by CI: a run that already yields (skipped with keep=True) has a patchable FFMA while the plain
# run has none; the patch rightly raises, and the oracle must only look at the runs the patch processes.
KEPT_RUN_EXAMPLE = [
    [[(33649187, 580931366581960705), (117731875, 580896182209871876), (201814563, 4470614278537223)],
     [(33649187, 580931366581960705), (117731875, 580931366581960708), (201814563, 580931366581960711),
      (285897251, 580931366581960714), (369979939, 4470614278537229)]],
    [(544, 576495936675512320)],
    [[(33649187, 4470614278537217), (117731875, 4470614278537220), (201814563, 4470614278537223),
      (285897251, 580931366581960714), (369979939, 580931366581960717), (454062627, 4470614278537232)],
     [(33649187, 580931366581960705), (117731875, 4470614278537220)]]]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(segments=st.lists(st.one_of(st.lists(promotion_chain(), min_size=1, max_size=6),
                                   st.lists(non_ffma_words(), min_size=1, max_size=3)), min_size=1, max_size=10),
       fraction=st.sampled_from([9 / 16, 0.5, 1.0]), keep=st.booleans())
@example(segments=KEPT_RUN_EXAMPLE, fraction=9 / 16, keep=True)
def test_patch_touches_only_eligible_ffma(segments, fraction, keep):
    base = compile_named("one_wg")
    offset, size = sass.text_sections(base)[KERNEL]
    words = [w for seg in segments for item in seg for w in (item if isinstance(item, list) else [item])]
    words = words[:size // 16]
    words += [(0x7918, 0x000FC00000000000)] * (size // 16 - len(words))   # NOP padding
    cubin = bytearray(base)
    for i, (lo, hi) in enumerate(words):
        struct.pack_into("<QQ", cubin, offset + 16 * i, lo, hi)
    cubin = bytes(cubin)
    assert ffma.ffma_runs(words) == _runs(words)
    yielding = lambda run: any(sass.yield_bit(words[i][1]) == 0 for i in run)  # noqa: E731  (ptxas yields)

    try:
        patched, count = ffma.interleave(cubin, fraction, keep_compiler_yields=keep)
    except ffma.FfmaPatchError:
        # Raised only when a run without yields has FFMAs to consider, and no run the patch processes (with
        # keep=True, those without yields) has anything to patch.
        assert any(not yielding(run) and int(len(run) * fraction) for run in _runs(words))
        assert all(not ffma.plan_run(words, run, fraction) for run in _runs(words) if not (keep and yielding(run)))
        return
    assert patched[:offset] == cubin[:offset] and patched[offset + size:] == cubin[offset + size:]
    new_words = words_of(patched)
    changed = [i for i in range(len(words)) if new_words[i] != words[i]]
    assert count == len(changed)

    considered = {i for run in _runs(words) for i in run[:int(len(run) * fraction)]}
    for i in changed:
        (lo, hi), (new_lo, new_hi) = words[i], new_words[i]
        assert i in considered and sass.is_ffma_rrr(lo, hi)
        assert new_lo == lo and hi ^ new_hi == ffma.PATCH_MASK
        assert ffma.patchable(lo, hi)
    for i, (lo, hi) in enumerate(words):
        if not sass.is_ffma(lo, hi):
            assert new_words[i] == (lo, hi)

    # The chain rule, checked on the result of each run the patch processed.
    for run in _runs(words):
        if keep and yielding(run):
            assert all(new_words[i] == words[i] for i in run)
            continue
        seen, prev_kept = set(), None
        for i in run[:int(len(run) * fraction)]:
            lo, hi = words[i]
            rb = sass.ffma_regs(lo, hi)[2]
            eligible = ffma.patchable(lo, hi)
            assert (i in changed) == (eligible and (rb not in seen or prev_kept == rb))
            prev_kept = rb if eligible and i not in changed else None
            seen.add(rb)


# ----------------------------------------------------------------------------- through the build
@pytest.fixture
def fresh_jit(tmp_path, monkeypatch):
    """An empty disk and memory cache, the default environment."""
    monkeypatch.setenv("CUGEMM8_CACHE_DIR", str(tmp_path))
    for var in ("CUGEMM8_JIT_DISABLE_CACHE", "CUGEMM8_DISABLE_FFMA_INTERLEAVE", "CUGEMM8_PRINT_FFMA_PATCH"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(jit, "_memory", {})
    monkeypatch.setattr(fp8_gemm, "_printed", set())
    monkeypatch.setattr(ffma, "FFMA_INTERLEAVE_DEFAULT", True)
    return tmp_path


@pytest.fixture(scope="module")
def raw_one_wg():
    return jit.compile_cubin(fp8_gemm.render(ONE_WG), name=f"{KERNEL}.cu")   # the name build() gives


def test_patch_is_applied_by_build(fresh_jit, raw_one_wg):
    off = fp8_gemm.build(ONE_WG, ffma=OFF)
    on = fp8_gemm.build(ONE_WG)
    assert off == raw_one_wg
    expected, count = ffma.interleave(raw_one_wg)
    assert on == expected and count > 0

    # Only the hi words of FFMA instructions differ, and each by exactly the patch's two bits.
    offset, size = sass.text_sections(raw_one_wg)[KERNEL]
    assert len(on) == len(off)
    diff = [i for i in range(len(on)) if on[i] != off[i]]
    assert diff and all(offset <= i < offset + size and (i - offset) % 16 >= 8 for i in diff)
    old = list(sass.instructions(off, KERNEL))
    new = list(sass.instructions(on, KERNEL))
    changed = [(o, n) for o, n in zip(old, new) if o != n]
    assert len(changed) == count
    for (_, lo, hi), (_, new_lo, new_hi) in changed:
        assert sass.is_ffma_rrr(lo, hi) and new_lo == lo and hi ^ new_hi == ffma.PATCH_MASK


def test_variants_follow_their_settings(fresh_jit, raw_one_wg):
    for name, spec in VARIANTS.items():
        s = ffma.ffma_settings(spec)
        expected, _ = ffma.interleave(raw_one_wg, s.fraction, keep_compiler_yields=s.keep_compiler_yields)
        assert fp8_gemm.build(ONE_WG, ffma=spec) == expected, name
        assert fp8_gemm.build(ONE_WG, ffma=s) == expected, name   # FfmaSettings accepted as well


def test_cache_keys_differ_between_on_and_off(fresh_jit, raw_one_wg):
    specs = {"off": OFF, "default": None, **VARIANTS}
    versions = {name: ffma.ffma_settings(spec).patch_version for name, spec in specs.items()}
    assert versions["off"] == "off" and versions["default"] == versions["on"]
    assert len(set(versions.values())) == len(specs) - 1
    for name, version in versions.items():
        if name != "off":
            assert ffma.PATCHER_VERSION in version
    source, options = fp8_gemm.render(ONE_WG), jit.default_options()
    keys = {jit.cache_key(source, options, v) for v in versions.values()}
    assert len(keys) == len(specs) - 1

    cubins = {name: fp8_gemm.build(ONE_WG, ffma=spec) for name, spec in specs.items()}
    assert len(list(fresh_jit.rglob("*.cubin"))) == len(keys)   # one disk entry per key
    # A new process's view (empty memory cache): each variant comes back from disk unchanged.
    jit._memory.clear()
    for name, spec in specs.items():
        assert fp8_gemm.build(ONE_WG, ffma=spec) == cubins[name], name
    assert cubins["off"] == raw_one_wg and cubins["on"] != cubins["off"]


def test_environment_switches(fresh_jit, raw_one_wg, monkeypatch):
    patched, _ = ffma.interleave(raw_one_wg)
    assert ffma.ffma_settings(None) == ffma.FfmaSettings()
    monkeypatch.setenv("CUGEMM8_DISABLE_FFMA_INTERLEAVE", "1")
    assert ffma.ffma_settings(None).enabled is False
    assert fp8_gemm.build(ONE_WG) == raw_one_wg
    assert fp8_gemm.build(ONE_WG, ffma={"enabled": True}) == patched   # explicit settings win
    monkeypatch.setenv("CUGEMM8_DISABLE_FFMA_INTERLEAVE", "0")
    assert fp8_gemm.build(ONE_WG) == patched
    # The default policy is a module constant.
    monkeypatch.delenv("CUGEMM8_DISABLE_FFMA_INTERLEAVE")
    monkeypatch.setattr(ffma, "FFMA_INTERLEAVE_DEFAULT", False)
    assert fp8_gemm.build(ONE_WG) == raw_one_wg
    monkeypatch.setenv("CUGEMM8_DISABLE_FFMA_INTERLEAVE", "0")
    assert fp8_gemm.build(ONE_WG) == patched


def test_print_patch(fresh_jit, monkeypatch, capsys):
    monkeypatch.setenv("CUGEMM8_PRINT_FFMA_PATCH", "1")
    fp8_gemm.build(ONE_WG)
    first = capsys.readouterr().out
    assert "patching" in first and "FFMAs changed" in first and " FFMA R" in first
    fp8_gemm.build(ONE_WG)                      # memory-cache hit, already reported: silent
    assert capsys.readouterr().out == ""
    jit._memory.clear()
    fp8_gemm._printed.clear()
    fp8_gemm.build(ONE_WG)                      # disk-cache hit: the same changes are reported
    again = capsys.readouterr().out
    assert "JIT cache" in again
    changes = [line for line in first.splitlines() if " FFMA R" in line]
    assert changes == [line for line in again.splitlines() if " FFMA R" in line]
    fp8_gemm.build(ONE_WG, ffma=OFF)
    assert " FFMA R" not in capsys.readouterr().out


def test_patch_error_falls_back_to_unpatched(fresh_jit, raw_one_wg, monkeypatch):
    def refuse(*args, **kwargs):
        raise ffma.FfmaPatchError("test")

    monkeypatch.setattr(ffma, "interleave", refuse)
    with pytest.warns(RuntimeWarning, match="unpatched"):
        assert fp8_gemm.build(ONE_WG) == raw_one_wg


def test_default_constants_are_read_at_call_time(monkeypatch):
    monkeypatch.delenv("CUGEMM8_DISABLE_FFMA_INTERLEAVE", raising=False)
    monkeypatch.setattr(ffma, "FFMA_INTERLEAVE_DEFAULT", True)
    monkeypatch.setattr(ffma, "FFMA_DEFAULT_FRACTION", 0.5)
    monkeypatch.setattr(ffma, "FFMA_DEFAULT_KEEP_COMPILER_YIELDS", False)
    expected = ffma.FfmaSettings(enabled=True, fraction=0.5, keep_compiler_yields=False)
    assert ffma.ffma_settings(None) == expected == ffma.ffma_settings({})


def test_settings_validation():
    with pytest.raises(ValueError):
        ffma.ffma_settings({"enabled": True, "fractoin": 0.5})
    for bad in (0.0, 1.5, -1.0):
        with pytest.raises(ValueError):
            ffma.ffma_settings({"fraction": bad})
    with pytest.raises(TypeError):
        ffma.ffma_settings({"enabled": 1})
    with pytest.raises(TypeError):
        ffma.ffma_settings(True)
    s = ffma.ffma_settings({"fraction": 1})
    assert s.fraction == 1.0 and isinstance(s.fraction, float)
    assert hash(s) == hash(ffma.FfmaSettings(fraction=1.0))
