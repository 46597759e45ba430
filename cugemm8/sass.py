"""Reading sm_90a cubins at the instruction level.

The library itself needs only the stdlib part: a small ELF64 reader, the instruction stream of each
kernel's ``.text.<kernel>`` section, and bit-field decoders for FFMA and the control bits. The
wrappers around NVIDIA's disassemblers (``cuobjdump``, ``nvdisasm``) are for tests and the CLI.

An sm_90 instruction is 128 bits, stored as two little-endian 64-bit words: ``lo`` (bits 0-63) then
``hi`` (bits 64-127). ``cuobjdump -sass`` prints ``lo`` on the instruction's line and ``hi`` on the
next one.
"""
from __future__ import annotations

import glob
import os
import re
import shutil
import site
import struct
import subprocess
import sys
import tempfile
from typing import Iterator, NamedTuple

# ----------------------------------------------------------------------------- ELF64


class Section(NamedTuple):
    name: str
    type: int
    flags: int
    offset: int   # in the file
    size: int


def section_headers(cubin: bytes) -> list[Section]:
    """All section headers of a little-endian ELF64 file, named from the section-name string table."""
    if len(cubin) < 64 or cubin[:4] != b"\x7fELF":
        raise ValueError("not an ELF file")
    if cubin[4] != 2 or cubin[5] != 1:
        raise ValueError("not a little-endian ELF64 file")
    shoff, = struct.unpack_from("<Q", cubin, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", cubin, 0x3A)
    if shoff == 0:
        return []
    if shentsize < 64 or shoff + shnum * shentsize > len(cubin):
        raise ValueError("truncated or malformed ELF section header table")
    raw = []
    for i in range(shnum):
        name, type_, flags, _addr, offset, size = struct.unpack_from("<IIQQQQ", cubin, shoff + i * shentsize)
        raw.append((name, type_, flags, offset, size))
    str_off, str_size = raw[shstrndx][3], raw[shstrndx][4]
    strtab = cubin[str_off:str_off + str_size]

    def name_at(i: int) -> str:
        end = strtab.find(b"\0", i)
        return strtab[i:end if end >= 0 else len(strtab)].decode("ascii", "replace")

    return [Section(name_at(n), t, f, o, s) for n, t, f, o, s in raw]


def text_sections(cubin: bytes) -> dict[str, tuple[int, int]]:
    """``{kernel: (file_offset, size)}`` for every ``.text.<kernel>`` section."""
    out = {}
    for sec in section_headers(cubin):
        if sec.name.startswith(".text."):
            if sec.offset + sec.size > len(cubin) or sec.size % 16:
                raise ValueError(f"malformed code section {sec.name}")
            out[sec.name[len(".text."):]] = (sec.offset, sec.size)
    return out


def instructions(cubin: bytes, kernel: str | None = None) -> Iterator[tuple[int, int, int]]:
    """``(file_offset, lo64, hi64)`` for each instruction of one kernel, or of all kernels in turn."""
    sections = text_sections(cubin)
    if kernel is not None:
        if kernel not in sections:
            raise KeyError(f"no .text.{kernel} section; kernels: {sorted(sections)}")
        sections = {kernel: sections[kernel]}
    for offset, size in sections.values():
        for pos in range(offset, offset + size, 16):
            lo, hi = struct.unpack_from("<QQ", cubin, pos)
            yield pos, lo, hi


# ----------------------------------------------------------------------------- decoding
# Low 12 bits of lo select the opcode and its operand form; bit 91 (hi bit 27) marks the forms with a
# uniform-register operand. The FFMA forms below were found by feeding encodings to `nvdisasm -b SM90a`
# (b = second source, c = third; a and the destination are always registers):
FFMA_FORMS = {
    # (lo & 0xfff, hi bit 27): (b operand, c operand)
    (0x223, 0): ("R", "R"),
    (0x423, 0): ("R", "imm"),      # b register in hi bits 0-7, c = 32-bit immediate in lo bits 32-63
    (0x623, 0): ("R", "c"),        # c = constant bank
    (0x823, 0): ("imm", "R"),
    (0xA23, 0): ("c", "R"),
    (0x623, 1): ("R", "cx"),       # constant bank indexed by a uniform register
    (0xA23, 1): ("cx", "R"),
    (0xC23, 1): ("UR", "R"),
    (0xE23, 1): ("R", "UR"),
}
FFMA_RRR = 0x223

YIELD_BIT = 1 << 45          # of hi (bit 109 of the instruction)
REUSE_SHIFT = 58             # hi bits 58-61: operand reuse flags, one per source slot
REUSE_MASK = 0xF << 58
REUSE_A = 1 << 58
REUSE_B = 1 << 59            # bit 123 of the instruction
REUSE_C = 1 << 60
RZ = 255


def opcode(lo: int) -> int:
    """Opcode and operand-form bits (low 12 bits of lo)."""
    return lo & 0xFFF


def _uniform_form(hi: int) -> int:
    return (hi >> 27) & 1


def is_ffma(lo: int, hi: int) -> bool:
    """Any FFMA form (register, immediate, constant or uniform-register operands)."""
    return (lo & 0xFFF, _uniform_form(hi)) in FFMA_FORMS


def is_ffma_rrr(lo: int, hi: int) -> bool:
    """``FFMA Rd, Ra, Rb, Rc``: all sources in registers (the promotion FFMAs)."""
    return lo & 0xFFF == FFMA_RRR and not _uniform_form(hi)


def predicate(lo: int) -> tuple[int, bool]:
    """Guard predicate (index, negated); index 7 is PT (always)."""
    return (lo >> 12) & 7, bool((lo >> 15) & 1)


def ffma_regs(lo: int, hi: int) -> tuple[int, int, int, int]:
    """``(Rd, Ra, Rb, Rc)`` of a register-form FFMA (255 = RZ)."""
    if not is_ffma_rrr(lo, hi):
        raise ValueError(f"not a register-form FFMA: {lo:#018x} {hi:#018x}")
    return (lo >> 16) & 0xFF, (lo >> 24) & 0xFF, (lo >> 32) & 0xFF, hi & 0xFF


def yield_bit(hi: int) -> int:
    """The raw yield control bit. It is active-low: 0 lets the scheduler switch warps after this
    instruction, and ptxas leaves it 1 on instructions that set a reuse flag."""
    return (hi >> 45) & 1


def stall_cycles(hi: int) -> int:
    return (hi >> 41) & 0xF


def reuse_flags(hi: int) -> int:
    """4-bit mask of operand-reuse flags: bit 0 = slot a, bit 1 = slot b, bit 2 = slot c.

    Only while the yield bit is 1: with yield on, nvdisasm shows no ``.reuse`` whatever bits 58-61
    hold (it accepts fewer of their values then, so they encode something else), and ptxas leaves
    them 0. This returns 0 in that case."""
    return (hi >> REUSE_SHIFT) & 0xF if yield_bit(hi) else 0


# ----------------------------------------------------------------------------- tools (tests, CLI)


def tool_path(name: str) -> str:
    """Path of a CUDA binary tool: pip's ``nvidia/cu13/bin`` (any site-packages), then PATH."""
    roots = list(sys.path)
    try:
        roots += site.getsitepackages() + [site.getusersitepackages()]
    except AttributeError:  # some virtualenv site modules lack these
        pass
    seen = set()
    for root in roots:
        if not root or root in seen:
            continue
        seen.add(root)
        for candidate in [os.path.join(root, "nvidia", "cu13", "bin", name)] + sorted(
                glob.glob(os.path.join(root, "nvidia", "*", "bin", name))):
            if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
                return candidate
    found = shutil.which(name)
    if found:
        return found
    for env in ("CUDA_HOME", "CUDA_PATH"):
        base = os.environ.get(env)
        if base and os.access(os.path.join(base, "bin", name), os.X_OK):
            return os.path.join(base, "bin", name)
    raise FileNotFoundError(f"{name} not found (pip install \"cugemm8[sass]\", "
                            "or put the CUDA toolkit's bin/ on PATH)")


def _run_on_file(args: list[str], data: bytes, suffix: str) -> str:
    with tempfile.TemporaryDirectory(prefix="cugemm8-") as tmp:
        path = os.path.join(tmp, "input" + suffix)
        with open(path, "wb") as f:
            f.write(data)
        res = subprocess.run(args + [path], capture_output=True, text=True)
    if res.returncode != 0:
        raise RuntimeError(f"{os.path.basename(args[0])} failed ({res.returncode}): {res.stderr.strip()}")
    return res.stdout


def disassemble(cubin: bytes) -> str:
    """``cuobjdump -sass`` listing of a cubin."""
    return _run_on_file([tool_path("cuobjdump"), "-sass"], cubin, ".cubin")


def disassemble_words(words: list[tuple[int, int]], arch: str = "SM90a") -> list[str]:
    """Text of each raw ``(lo, hi)`` instruction, via one ``nvdisasm -b`` call. nvdisasm rejects the
    whole batch if any word is not a valid encoding."""
    blob = b"".join(struct.pack("<QQ", lo, hi) for lo, hi in words)
    out = _run_on_file([tool_path("nvdisasm"), "-b", arch, "-hex"], blob, ".bin")
    rows = parse_listing(out)
    if [off for off, *_ in rows] != list(range(0, 16 * len(words), 16)):
        raise RuntimeError(f"nvdisasm printed {len(rows)} instructions for {len(words)} words")
    return [text for _, text, _, _ in rows]


_LISTING_RE = re.compile(
    r"/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;\s*/\* (0x[0-9a-f]{16}) \*/\s*\n\s*/\* (0x[0-9a-f]{16}) \*/")


def parse_listing(text: str) -> list[tuple[int, str, int, int]]:
    """``(offset, instruction_text, lo64, hi64)`` for each instruction of a cuobjdump/nvdisasm listing
    printed with hex (offsets restart at 0 in each kernel)."""
    return [(int(off, 16), ins, int(lo, 16), int(hi, 16)) for off, ins, lo, hi in _LISTING_RE.findall(text)]


def resource_usage(cubin: bytes) -> dict[str, dict[str, int]]:
    """``{kernel: {"REG": .., "STACK": .., "SHARED": .., "LOCAL": .., ...}}`` from ``cuobjdump -res-usage``."""
    text = _run_on_file([tool_path("cuobjdump"), "-res-usage"], cubin, ".cubin")
    usage: dict[str, dict[str, int]] = {}
    current = None
    for line in text.splitlines():
        m = re.match(r"\s*Function\s+(\S+?):?\s*$", line)
        if m:
            current = usage.setdefault(m.group(1), {})
        elif current is not None:
            for key, value in re.findall(r"([A-Z]+(?:\[\d+\])?):(\d+)", line):
                current[key] = int(value)
    return usage
