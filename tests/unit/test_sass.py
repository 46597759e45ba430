"""CPU tier: cugemm8.sass (ELF and instruction decoding) against cuobjdump and nvdisasm, on real
kernels and on random FFMA encodings (checked in batches: each tool call costs about 0.45 s)."""
import random

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from cugemm8 import ffma, sass
from sass_oracle import KERNEL, needs_tools, reg_of, reuse_slots, split_text, words_of


# ----------------------------------------------------------------------------- real kernels
@needs_tools
def test_decoders_agree_with_cuobjdump(cubins, listings):
    for name, cubin in cubins.items():
        assert list(sass.text_sections(cubin)) == [KERNEL]
        listing = listings[name]
        assert [(lo, hi) for _, _, lo, hi in listing] == words_of(cubin)
        offset, size = sass.text_sections(cubin)[KERNEL]
        assert size == 16 * len(listing)
        assert [o for o, _, _ in sass.instructions(cubin)] == [offset + 16 * i for i in range(len(listing))]
        num_ffma = 0
        for _, text, lo, hi in listing:
            pred, mnemonic, ops = split_text(text)
            assert sass.is_ffma(lo, hi) == (mnemonic.split(".")[0] == "FFMA"), text
            if sass.is_ffma_rrr(lo, hi):
                num_ffma += 1
                regs = [reg_of(o) for o in ops]
                assert tuple(r for r, _ in regs) == sass.ffma_regs(lo, hi), text
                assert [reuse for _, reuse in regs[1:]] == reuse_slots(hi), text
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
        p0, m0, ops0 = split_text(originals[(lo, hi)])
        assert split_text(text) == (p0, m0, ops0[:2] + [ops0[2].replace(".reuse", "")] + ops0[3:])
    for (lo, hi), text in zip(words, texts):
        pred, mnemonic, ops = split_text(text)
        assert sass.is_ffma(lo, hi) and mnemonic.split(".")[0] == "FFMA", text
        index, negated = sass.predicate(lo)
        expected_pred = "" if (index, negated) == (7, False) else "@" + "!" * negated + "P" + "0123456T"[index]
        assert pred == expected_pred, text
        assert reg_of(ops[0])[0] == (lo >> 16) & 0xFF, text
        if sass.is_ffma_rrr(lo, hi):
            regs = [reg_of(o) for o in ops]
            assert tuple(r for r, _ in regs) == sass.ffma_regs(lo, hi), text
            assert [reuse for _, reuse in regs[1:]] == reuse_slots(hi), text
        else:
            with pytest.raises(ValueError):
                sass.ffma_regs(lo, hi)
