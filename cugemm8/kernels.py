"""Render and build the GEMM kernel for one configuration.

The kernel lives in ``cuda_src/fp8_gemm.cuh``; this module writes the small translation unit that
fixes its compile-time constants and adds the one ``wgmma`` wrapper for the chosen BLOCK_N (an
inline-asm operand list of BLOCK_N/2 accumulators, which the C preprocessor cannot generate).
"""
from __future__ import annotations

import os
import warnings
from dataclasses import dataclass
from typing import Mapping, Union

from . import ffma as _ffma
from . import jit
from .heuristics import GEMM_TYPE_CODE, KernelConfig

KERNEL_NAME = "cugemm8_fp8_gemm"

# The FFMA interleave patch (cugemm8.ffma) applied by build() when the caller gives no ``ffma=``:
# on or off, and its parameters. CUGEMM8_DISABLE_FFMA_INTERLEAVE=1 turns it off (=0 forces it on).
# Off by default: measured on an H200 with NVRTC 13.0, the patch changed no kernel's time beyond the
# run-to-run spread (geometric mean of on/off 1.0006 over 28 shapes, against 1.0029 between two
# timings of the same unpatched kernel; bench/results/v4/ffma-ab-*.json, NOTES.md). ptxas 13 already
# interleaves yields on the two-warpgroup kernels' promotion FFMAs.
FFMA_INTERLEAVE_DEFAULT = False
FFMA_DEFAULT_FRACTION = 9 / 16
FFMA_DEFAULT_KEEP_COMPILER_YIELDS = True


def wgmma_wrapper(n: int) -> str:
    """`wgmma_m64k32(d, desc_a, desc_b, scale_d)`: one m64nNk32 e4m3 x e4m3 -> f32 MMA from shared memory."""
    regs = n // 2
    outs = ", ".join(f"%{i}" for i in range(regs))
    constraints = ", ".join(f'"+f"(d[{i}])' for i in range(regs))
    return (
        "__device__ __forceinline__ void wgmma_m64k32(float (&d)[%d], uint64_t desc_a, uint64_t desc_b, "
        "uint32_t scale_d) {\n"
        '    asm volatile("{\\n .reg .pred p;\\n setp.ne.b32 p, %%%d, 0;\\n"\n'
        '        " wgmma.mma_async.sync.aligned.m64n%dk32.f32.e4m3.e4m3 {%s}, %%%d, %%%d, p, 1, 1;\\n}"\n'
        "        : %s\n"
        '        : "l"(desc_a), "l"(desc_b), "r"(scale_d));\n'
        "}\n"
    ) % (regs, regs + 2, n, outs, regs, regs + 1, constraints)


def render(cfg: KernelConfig) -> str:
    consts = {
        "kShapeN": cfg.n,
        "kShapeK": cfg.k,
        "kBlockM": cfg.block_m,
        "kBlockN": cfg.block_n,
        "kStages": cfg.stages,
        "kNumMathWG": cfg.num_math_wg,
        "kSwizzleD": cfg.swizzle_d,
        "kGemmType": GEMM_TYPE_CODE[cfg.layout],
        "kNumGroups": cfg.num_groups,
        "kRasterGroup": cfg.raster_group,
        "kClusterSize": cfg.cluster,
        "kTailSplit": int(cfg.tail_split),
        "kRecordSlots": cfg.record_slots,
    }
    lines = ['#include "ptx.cuh"', "namespace cg8 {"]
    lines += [f"constexpr uint32_t {name} = {value};" for name, value in consts.items()]
    lines.append(wgmma_wrapper(cfg.block_n))
    lines.append("}  // namespace cg8")
    attr = f"__cluster_dims__({cfg.cluster_dims}, 1, 1)" if cfg.cluster_dims > 1 else ""
    lines += [f"#define CG8_CLUSTER_ATTRIBUTE {attr}", '#include "fp8_gemm.cuh"', ""]
    return "\n".join(lines)


@dataclass(frozen=True)
class FfmaSettings:
    """How build() patches a cubin: hashable, so it can be part of a cache key."""
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
        return f"{_ffma.PATCHER_VERSION};fraction={self.fraction!r};keep_compiler_yields={int(self.keep_compiler_yields)}"


FfmaSpec = Union[None, FfmaSettings, Mapping]
_FFMA_KEYS = {"enabled", "fraction", "keep_compiler_yields"}


def ffma_interleave_enabled() -> bool:
    """The default policy: FFMA_INTERLEAVE_DEFAULT unless CUGEMM8_DISABLE_FFMA_INTERLEAVE says otherwise."""
    value = os.environ.get("CUGEMM8_DISABLE_FFMA_INTERLEAVE", "")
    if value == "":
        return FFMA_INTERLEAVE_DEFAULT
    return value == "0"


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


def _print_patch() -> bool:
    return os.environ.get("CUGEMM8_PRINT_FFMA_PATCH", "") not in ("", "0")


_printed: set[tuple[str, str]] = set()   # (source, patch_version) already reported in this process


def build(cfg: KernelConfig, *, ffma: FfmaSpec = None) -> bytes:
    """The cubin for `cfg` (cached in memory and on disk), FFMA-patched per `ffma` (see ffma_settings)."""
    settings = ffma_settings(ffma)
    source, name = render(cfg), f"{KERNEL_NAME}.cu"
    if not settings.enabled:
        return jit.build(source, name=name, patch_version=settings.patch_version)
    verbose = _print_patch()
    ran = []

    def patch(cubin: bytes) -> bytes:
        ran.append(True)
        if verbose:
            print(f"cugemm8 ffma: patching {cfg} ({settings.patch_version})")
        try:
            return _ffma.interleave(cubin, settings.fraction, keep_compiler_yields=settings.keep_compiler_yields,
                                    verbose=verbose)[0]
        except _ffma.FfmaPatchError as exc:   # the patch is an optimization: never fail a kernel over it
            warnings.warn(f"cugemm8: FFMA interleave left {cfg} unpatched: {exc}", RuntimeWarning, stacklevel=2)
            return cubin

    cubin = jit.build(source, name=name, patch=patch, patch_version=settings.patch_version)
    key = (source, settings.patch_version)
    if verbose and key not in _printed:
        _printed.add(key)
        if not ran:   # came from a cache: report by patching the unpatched cubin again (deterministic)
            print(f"cugemm8 ffma: {cfg} ({settings.patch_version}) came from the JIT cache; its patch was:")
            plain = jit.build(source, name=name, patch_version="off")
            try:
                _ffma.interleave(plain, settings.fraction, keep_compiler_yields=settings.keep_compiler_yields,
                                 verbose=True)
            except _ffma.FfmaPatchError as exc:
                print(f"cugemm8 ffma: left unpatched: {exc}")
    return cubin
