"""FFMA interleaving: a control-bit patch of the promotion FFMAs (DeepGEMM applies the same rule to
its cubins), and the settings that say whether and how the GEMM kernel's build applies it.

The promotion ``fin += scale * acc`` compiles to long runs of register-form FFMAs that share the
scale register as their second source (Rb). ptxas marks that operand ``.reuse`` so that the next FFMA
reads it from the operand-reuse cache, and leaves the warp's yield hint off on such instructions. On
alternating FFMAs of each chain the patch clears the Rb reuse flag and turns the yield hint on, which
gives the scheduler a chance to switch warps inside the run. The two bits change together: after a
yield another warp may issue before this warp's next FFMA, and on a yielding instruction bits 58-61 no
longer hold reuse flags at all (nvdisasm shows none; ptxas leaves them 0). Only control bits change:
the patched code computes the same values, and the cubin keeps its size and layout.

Instructions are decoded from the ELF's code sections (cugemm8.sass); no disassembler is needed.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Union

from . import envvars, sass

# Part of the JIT cache key (with any non-default argument of interleave): bump it whenever the
# patch's output for a given cubin may change.
PATCHER_VERSION = "ffma-interleave-1"

MIN_RUN = 8                                  # shorter FFMA runs are not promotion code
PATCH_MASK = sass.REUSE_B | sass.YIELD_BIT   # hi-word bits the patch flips


class FfmaPatchError(RuntimeError):
    """The cubin holds FFMA runs that look like promotion code, yet the rule changed nothing."""


def ffma_runs(words: list[tuple[int, int]]) -> list[range]:
    """Index ranges of maximal runs of at least MIN_RUN consecutive FFMAs (any operand form).

    Any other instruction ends a run. In the compiled kernel the promotion FFMAs form one unbroken
    block per 64-row wave whenever registers allow; where they are split (by FMULs that recompute
    the scale register, or by the next WGMMA's descriptor arithmetic) the pieces are short, the
    scale register is redefined in between, and the warp already has other work to switch at.
    """
    runs, start = [], None
    for i, (lo, hi) in enumerate(words + [(0, 0)]):   # sentinel closes a trailing run
        if i < len(words) and sass.is_ffma(lo, hi):
            if start is None:
                start = i
        elif start is not None:
            if i - start >= MIN_RUN:
                runs.append(range(start, i))
            start = None
    return runs


def patchable(lo: int, hi: int) -> bool:
    """A register-form FFMA, yield off, whose only reuse flag is Rb's (the one form ptxas gives the
    promotion FFMAs). Patched, it matches ptxas's own yielding FFMAs: yield on, bits 58-61 zero."""
    return sass.is_ffma_rrr(lo, hi) and sass.yield_bit(hi) == 1 and hi & sass.REUSE_MASK == sass.REUSE_B


def plan_run(words: list[tuple[int, int]], run: range, fraction: float) -> list[int]:
    """Indices (into ``words``) of the FFMAs of one run whose hi word gets ``^= PATCH_MASK``.

    Within the first ``floor(len(run) * fraction)`` FFMAs, each chain of FFMAs reusing one Rb is
    patched at its head and then on every other member: a patchable FFMA is patched when its Rb has
    not appeared earlier in the run, or when the FFMA just before it shares that Rb and kept its
    reuse flag. Every other FFMA keeps its flags.
    """
    seen_rb: set[int] = set()
    kept_reuse_rb = None     # Rb of the previous FFMA if it is patchable and stays unpatched
    chosen = []
    for i in run[:int(len(run) * fraction)]:
        lo, hi = words[i]
        rb = sass.ffma_regs(lo, hi)[2] if sass.is_ffma_rrr(lo, hi) else None
        if patchable(lo, hi):
            if rb not in seen_rb or kept_reuse_rb == rb:
                chosen.append(i)
                kept_reuse_rb = None
            else:
                kept_reuse_rb = rb
        else:
            kept_reuse_rb = None
        if rb is not None:
            seen_rb.add(rb)
    return chosen


def interleave(cubin: bytes, fraction: float = 9 / 16, *, keep_compiler_yields: bool = True,
               verbose: bool = False) -> tuple[bytes, int]:
    """Patch every kernel of ``cubin``; returns ``(patched_cubin, instructions_changed)``.

    ptxas (NVRTC 13.5) already alternates yield / reuse on the promotion FFMAs of some kernels (those
    with two math warpgroups). With ``keep_compiler_yields`` such runs, recognised by any FFMA of the
    run already having yield on, are left alone: the rule would only turn their chain heads into
    extra yields. Pass False to apply the rule to every run, as DeepGEMM does. A cubin patched once
    comes back unchanged (count 0) from a second call.

    Raises FfmaPatchError when some run has no yields at all (and a non-empty first ``fraction``) and
    still nothing was patched: promotion code that the patch should have reached.
    """
    if not 0.0 < fraction <= 1.0:
        raise ValueError(f"fraction must lie in (0, 1], got {fraction}")
    verbose = verbose or print_patch_enabled()
    sections = sass.text_sections(cubin)
    if not sections:
        raise ValueError("cubin has no .text.<kernel> sections")

    out = bytearray(cubin)
    changed = plain_runs = yielding_runs = 0
    for kernel, (base, _size) in sections.items():
        words = [(lo, hi) for _, lo, hi in sass.instructions(cubin, kernel)]
        for run in ffma_runs(words):
            if any(sass.yield_bit(words[i][1]) == 0 for i in run):
                yielding_runs += 1
                if keep_compiler_yields:
                    continue
            elif int(len(run) * fraction):
                plain_runs += 1
            for i in plan_run(words, run, fraction):
                lo, hi = words[i]
                new_hi = hi ^ PATCH_MASK
                out[base + 16 * i + 8:base + 16 * i + 16] = new_hi.to_bytes(8, "little")
                changed += 1
                if verbose:
                    rd, ra, rb, rc = sass.ffma_regs(lo, hi)
                    print(f"cugemm8 ffma: {kernel} /*{16 * i:04x}*/ FFMA R{rd}, R{ra}, R{rb}, R{rc}: "
                          f"hi {hi:#018x} -> {new_hi:#018x}")
    if verbose:
        print(f"cugemm8 ffma: {changed} FFMAs changed; FFMA runs of >= {MIN_RUN}: {plain_runs} without "
              f"yields, {yielding_runs} already yielding ({'kept' if keep_compiler_yields else 'patched'})")
    if plain_runs and not changed:
        raise FfmaPatchError(f"{plain_runs} FFMA runs without yields found, but no FFMA was patched "
                             "(no Rb-reuse chains in the considered part of any run)")
    return bytes(out), changed


# ----------------------------------------------------------------------------- settings
# The default when a build is given no settings. Off: the patch moved no kernel's time beyond the
# run-to-run spread, since ptxas 13 already interleaves yields where it matters (NOTES.md v4).
FFMA_INTERLEAVE_DEFAULT = False
FFMA_DEFAULT_FRACTION = 9 / 16
FFMA_DEFAULT_KEEP_COMPILER_YIELDS = True
DISABLE_ENV = envvars.DISABLE_FFMA_INTERLEAVE   # on: the patch is off; off ("0"): on; unset: the default
PRINT_ENV = envvars.PRINT_FFMA_PATCH            # a flag: print each patched FFMA


@dataclass(frozen=True)
class FfmaSettings:
    """How a build patches a cubin: hashable, so it can be part of a cache key."""
    enabled: bool = True
    fraction: float = FFMA_DEFAULT_FRACTION
    keep_compiler_yields: bool = FFMA_DEFAULT_KEEP_COMPILER_YIELDS

    def __post_init__(self):
        if not isinstance(self.enabled, bool) or not isinstance(self.keep_compiler_yields, bool):
            raise TypeError(f"enabled and keep_compiler_yields must be bool, got {self!r}")
        if isinstance(self.fraction, bool) or not isinstance(self.fraction, (int, float)) \
                or not 0.0 < self.fraction <= 1.0:
            raise ValueError(f"fraction must be a number in (0, 1], got {self.fraction!r}")
        object.__setattr__(self, "fraction", float(self.fraction))

    @property
    def patch_version(self) -> str:
        """The JIT cache-key part: patched and unpatched cubins never share an entry."""
        if not self.enabled:
            return "off"
        return f"{PATCHER_VERSION};fraction={self.fraction!r};keep_compiler_yields={int(self.keep_compiler_yields)}"


FfmaSpec = Union[None, FfmaSettings, Mapping]
_FFMA_KEYS = {"enabled", "fraction", "keep_compiler_yields"}


def ffma_interleave_enabled() -> bool:
    """The default policy: FFMA_INTERLEAVE_DEFAULT unless CUGEMM8_DISABLE_FFMA_INTERLEAVE says otherwise."""
    if not envvars.is_set(DISABLE_ENV):
        return FFMA_INTERLEAVE_DEFAULT
    return not envvars.flag(DISABLE_ENV)


def print_patch_enabled() -> bool:
    """CUGEMM8_PRINT_FFMA_PATCH asks for every patched FFMA to be printed."""
    return envvars.flag(PRINT_ENV)


def ffma_settings(ffma: FfmaSpec = None) -> FfmaSettings:
    """``None``: the default policy (constants above and the environment); a mapping with any of
    ``enabled``, ``fraction``, ``keep_compiler_yields`` (missing keys take the defaults, the
    environment is not read); or an FfmaSettings."""
    if isinstance(ffma, FfmaSettings):
        return ffma
    defaults = {"enabled": True, "fraction": FFMA_DEFAULT_FRACTION,
                "keep_compiler_yields": FFMA_DEFAULT_KEEP_COMPILER_YIELDS}
    if ffma is None:
        return FfmaSettings(**{**defaults, "enabled": ffma_interleave_enabled()})
    if isinstance(ffma, Mapping):
        unknown = set(ffma) - _FFMA_KEYS
        if unknown:
            raise ValueError(f"unknown ffma settings {sorted(unknown)}; expected some of {sorted(_FFMA_KEYS)}")
        return FfmaSettings(**{**defaults, **ffma})
    raise TypeError(f"ffma must be None, a mapping or FfmaSettings, got {type(ffma).__name__}")
