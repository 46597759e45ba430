"""CPU tests of cugemm8.sass (ELF / instruction decoding) and cugemm8.ffma (the FFMA interleave patch).

Real kernels come from NVRTC; pip's cuobjdump / nvdisasm are the oracles. Each tool call costs about
0.45 s, so listings are made once per module and random words are checked in batches.
"""
import functools
import random
import re
import struct

import pytest
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

from cugemm8 import ffma, fp8_gemm, heuristics, jit, sass

# (layout, M, N, K, groups, SMs): a two-math-warpgroup kernel (BLOCK_M 256) and a one-warpgroup one (BLOCK_M 64)
SHAPES = {"two_wg": ("normal", 4096, 7168, 16384, 1, 132), "one_wg": ("normal", 64, 2112, 7168, 1, 132)}
KERNEL = fp8_gemm.KERNEL_NAME


def _tools_available() -> bool:
    try:
        sass.tool_path("cuobjdump"), sass.tool_path("nvdisasm")
        return True
    except FileNotFoundError:
        return False


needs_tools = pytest.mark.skipif(not _tools_available(), reason="cuobjdump/nvdisasm not installed")


# Fixed configurations (not the heuristic's current picks, which move as it is tuned): one math
# warpgroup (BLOCK_M=64, no compiler yields on the promotion FFMAs) and two (BLOCK_M=256).
CONFIGS = {
    "one_wg": heuristics.KernelConfig("normal", 2112, 7168, 1, 64, 16, 16, 1, 32),
    "two_wg": heuristics.KernelConfig("normal", 7168, 16384, 1, 256, 128, 3, 2, 128),
}


@functools.lru_cache(maxsize=None)
def _compile(name):
    return jit.compile_cubin(fp8_gemm.render(CONFIGS[name]))


@pytest.fixture(scope="module")
def cubins():
    return {name: _compile(name) for name in SHAPES}


@pytest.fixture(scope="module")
def listings(cubins):
    return {name: sass.parse_listing(sass.disassemble(cubin)) for name, cubin in cubins.items()}


def _words(cubin, kernel=None):
    return [(lo, hi) for _, lo, hi in sass.instructions(cubin, kernel)]


_PRED = re.compile(r"^@(!?)P([0-6T])\s+")


def _split(text):
    """(predicate_text, mnemonic, [operands]) of one instruction's text."""
    m = _PRED.match(text)
    pred = m.group(0).strip() if m else ""
    rest = text[m.end():] if m else text
    mnemonic, _, ops = rest.partition(" ")
    return pred, mnemonic, [o.strip() for o in ops.split(",")] if ops else []


def _reg(operand):
    """(register number, has .reuse) of a register operand: 'R12', '-|R12.reuse|', '|R12|.reuse'."""
    m = re.fullmatch(r"-?\|?R(Z|\d+)(\.reuse)?\|?(\.reuse)?", operand)
    assert m, operand
    return (255 if m.group(1) == "Z" else int(m.group(1))), bool(m.group(2) or m.group(3))


def _reuse_slots(hi):
    return [bool(sass.reuse_flags(hi) >> slot & 1) for slot in range(3)]


# ----------------------------------------------------------------------------- sass on real kernels


@needs_tools
def test_decoders_agree_with_cuobjdump(cubins, listings):
    for name, cubin in cubins.items():
        assert list(sass.text_sections(cubin)) == [KERNEL]
        listing = listings[name]
        assert [(lo, hi) for _, _, lo, hi in listing] == _words(cubin)
        offset, size = sass.text_sections(cubin)[KERNEL]
        assert size == 16 * len(listing)
        assert [o for o, _, _ in sass.instructions(cubin)] == [offset + 16 * i for i in range(len(listing))]
        num_ffma = 0
        for _, text, lo, hi in listing:
            pred, mnemonic, ops = _split(text)
            assert sass.is_ffma(lo, hi) == (mnemonic.split(".")[0] == "FFMA"), text
            if sass.is_ffma_rrr(lo, hi):
                num_ffma += 1
                regs = [_reg(o) for o in ops]
                assert tuple(r for r, _ in regs) == sass.ffma_regs(lo, hi), text
                assert [reuse for _, reuse in regs[1:]] == _reuse_slots(hi), text
                # The patch copies this: ptxas leaves bits 58-61 zero on a yielding FFMA.
                assert sass.yield_bit(hi) or hi & sass.REUSE_MASK == 0, text
        assert num_ffma >= 8


@needs_tools
def test_resource_usage(cubins):
    usage = sass.resource_usage(cubins["one_wg"])
    assert list(usage) == [KERNEL]
    assert {"REG", "STACK", "SHARED", "LOCAL"} <= set(usage[KERNEL])
    assert 0 < usage[KERNEL]["REG"] <= 255 and usage[KERNEL]["LOCAL"] == 0


def test_elf_errors():
    with pytest.raises(ValueError):
        sass.text_sections(b"not an elf file" * 8)
    with pytest.raises(KeyError):
        next(sass.instructions(b"\x7fELF\x02\x01" + bytes(58), "missing"))


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
        p0, m0, ops0 = _split(text0)
        p1, m1, ops1 = _split(text1)
        assert (p0, m0, ops0[:2], ops0[3:]) == (p1, m1, ops1[:2], ops1[3:])
        assert ops0[2].endswith(".reuse") and ops1[2] == ops0[2][:-len(".reuse")]
    assert differing == count

    # Bytes outside the patched hi words are untouched.
    offset, _ = sass.text_sections(cubin)[KERNEL]
    diff = [i for i in range(len(cubin)) if cubin[i] != patched[i]]
    assert all((i - offset) % 16 >= 8 for i in diff)


def test_interleave_keeps_compiler_yields_and_is_idempotent(cubins):
    for cubin in cubins.values():
        words = _words(cubin)
        patched, count = ffma.interleave(cubin)
        new_words = _words(patched)
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
    words = _words(cubin)
    patched, count = ffma.interleave(cubin)
    new_words = _words(patched)
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
    words = _words(bytes(cubin))
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

# Which control-bit combinations nvdisasm accepts on FFMA (found by decoding every combination):
# - yield bit 1 (off) needs a stall count of 1..11;
# - yield bit 0 (on) with stall 0 allows no reuse flag but the spare bit 3, and with any other stall
#   it refuses reuse on both slots b and c at once;
# - slots holding an immediate, a constant or a uniform register cannot be flagged for reuse.
_REUSE_SLOTS = {("R", "R"): 0b1111, ("R", "imm"): 0b1011, ("R", "c"): 0b1011, ("R", "cx"): 0b1011,
                ("R", "UR"): 0b1011, ("imm", "R"): 0b1101, ("c", "R"): 0b1101, ("cx", "R"): 0b1101,
                ("UR", "R"): 0b1101}


def _valid_control(operands, stall, yield_bit, reuse):
    if reuse & ~_REUSE_SLOTS[operands]:
        return False
    if yield_bit:
        return 1 <= stall <= 11
    return reuse & ~0b1000 == 0 if stall == 0 else reuse & 0b0110 != 0b0110


def random_ffma_words(rng, count):
    """Valid FFMA encodings of every operand form with random registers, modifiers and control bits."""
    words, forms = [], sorted(sass.FFMA_FORMS)
    while len(words) < count:
        form, uniform = key = rng.choice(forms)
        stall, yield_bit, reuse = rng.randrange(16), rng.randrange(2), rng.randrange(16)
        if rng.random() < 0.25:   # what the patch changes: register form, yield off, Rb reuse only
            form, uniform = key = sass.FFMA_RRR, 0
            yield_bit, reuse = 1, 0b0010
        if not _valid_control(sass.FFMA_FORMS[key], stall, yield_bit, reuse):
            continue
        lo = form | rng.getrandbits(52) << 12
        hi = (rng.getrandbits(17) | uniform << 27 | stall << 41 | yield_bit << 45
              | rng.getrandbits(12) << 46 | reuse << 58)          # barriers and wait mask: bits 46-57
        words.append((lo, hi))
    return words


# One nvdisasm call per example; shrinking would make hundreds more, so a failure is reported unshrunk.
@needs_tools
@settings(max_examples=4, deadline=None, phases=[Phase.explicit, Phase.reuse, Phase.generate],
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.integers(0, 2**64 - 1))
def test_ffma_decoders_against_nvdisasm(seed):
    words = random_ffma_words(random.Random(seed), 400)
    # The patch's output must decode too: append the patched form of every FFMA it may change.
    eligible = [(lo, hi) for lo, hi in words if ffma.patchable(lo, hi)]
    texts = sass.disassemble_words(words + [(lo, hi ^ ffma.PATCH_MASK) for lo, hi in eligible])
    originals = dict(zip(words, texts))
    for (lo, hi), text in zip(eligible, texts[len(words):]):
        p0, m0, ops0 = _split(originals[(lo, hi)])
        assert _split(text) == (p0, m0, ops0[:2] + [ops0[2].replace(".reuse", "")] + ops0[3:])
    for (lo, hi), text in zip(words, texts):
        pred, mnemonic, ops = _split(text)
        assert sass.is_ffma(lo, hi) and mnemonic.split(".")[0] == "FFMA", text
        index, negated = sass.predicate(lo)
        expected_pred = "" if (index, negated) == (7, False) else "@" + "!" * negated + "P" + "0123456T"[index]
        assert pred == expected_pred, text
        assert _reg(ops[0])[0] == (lo >> 16) & 0xFF, text
        if sass.is_ffma_rrr(lo, hi):
            regs = [_reg(o) for o in ops]
            assert tuple(r for r, _ in regs) == sass.ffma_regs(lo, hi), text
            assert [reuse for _, reuse in regs[1:]] == _reuse_slots(hi), text
        else:
            with pytest.raises(ValueError):
                sass.ffma_regs(lo, hi)


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
    base = _compile("one_wg")
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
    new_words = _words(patched)
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
