"""The small-M kernel's host side (``cuda_src/small_m.cuh``): its configuration, source, cubin and launch.

Dense GEMMs with a few rows of A (decode) read B's weights once; this kernel reads them straight into
registers, with B's rows on the MMA's 16-row side and A's rows on its 8-wide side, and divides K over a
cluster where B has too few rows to fill the SMs. The heuristic (heuristics.choose_small_m) decides when it
runs and with which configuration. No tensor maps: a launch only packs five pointers and five sizes.
"""
from __future__ import annotations

import ctypes
import threading
from dataclasses import dataclass

import cupy

from . import jit, runtime
from .layout import get_tma_aligned_size

KERNEL_NAME = "cugemm8_fp8_small_m"
MAX_TOKENS = 32          # rows of A the kernel takes (8 per token tile, at most 4 tiles)


@dataclass(frozen=True)
class SmallMConfig:
    """One compile of the small-M kernel (the template parameters of cg8::SmallMConfig)."""
    n: int
    k: int
    token_tiles: int     # 8 rows of A each
    row_tiles: int       # 16 rows of B each: a CTA's rows
    warps: int
    split: int           # CTAs of a cluster dividing the k-blocks (1: no cluster)
    depth: int = 2       # k-blocks a warp has in flight

    @property
    def rows(self) -> int:
        return 16 * self.row_tiles

    @property
    def threads(self) -> int:
        return 32 * self.warps

    @property
    def grid(self) -> int:
        return -(-self.n // self.rows) * self.split

    def __str__(self) -> str:
        return (f"small-M N={self.n} K={self.k}: {self.rows} rows x {8 * self.token_tiles} tokens a CTA, "
                 f"{self.warps} warps, {self.depth} k-blocks in flight" + (f", K split over {self.split}" if self.split > 1 else ""))


def render(cfg: SmallMConfig) -> str:
    """The translation unit of one configuration."""
    lines = ['#include "small_m.cuh"',
             f"namespace cg8 {{ using SmallM = SmallMConfig<{cfg.n}, {cfg.k}, {cfg.token_tiles}, {cfg.row_tiles}, "
             f"{cfg.warps}, {cfg.split}, {cfg.depth}>; }}"]
    if cfg.split > 1:
        lines.append(f"#define CG8_CLUSTER_DIMS __cluster_dims__({cfg.split}, 1, 1)")
    lines.append('#include "fp8_small_m.cu"')
    return "\n".join(lines) + "\n"


def build(cfg: SmallMConfig) -> bytes:
    """The cubin of `cfg` (through the JIT caches)."""
    return jit.build(render(cfg), name=f"{KERNEL_NAME}.cu")


_kernels: dict[tuple[int, SmallMConfig], runtime.LoadedFunction] = {}
_lock = threading.Lock()


def get_kernel(cfg: SmallMConfig, device: int) -> runtime.LoadedFunction:
    key = (device, cfg)
    kern = _kernels.get(key)
    if kern is None:
        with _lock:
            kern = _kernels.get(key)
            if kern is None:
                kern = _kernels[key] = runtime.LoadedFunction(build(cfg), KERNEL_NAME, device, 0, cfg.threads,
                                                              cfg.split, str(cfg))
    return kern


class SmallMLauncher:
    """The kernel of one configuration bound to one geometry (M and the row strides); launch() has
    GemmLauncher's signature, so the API drives both alike (the layout and e4m3-scale pointers are unused)."""

    def __init__(self, cfg: SmallMConfig, device: int, m: int, a_ld: int, b_ld: int, sa_ld: int, d_ld: int):
        self.config = cfg
        self.kernel = get_kernel(cfg, device)
        self.grid = cfg.grid
        self._function = int(self.kernel.function)
        self._ptrs = [ctypes.c_uint64(0) for _ in range(5)]   # a, sa, b, sb, d
        self._sizes = [ctypes.c_uint32(v) for v in (m, a_ld, b_ld, sa_ld, d_ld)]
        self._argv = (ctypes.c_void_p * 10)(*(ctypes.addressof(x) for x in self._ptrs + self._sizes))
        self._argv_addr = ctypes.addressof(self._argv)
        fns = runtime.libcuda_functions()
        self._cu_launch, self._cu_launch_ex = fns["cuLaunchKernel"], fns["cuLaunchKernelEx"]
        self._pdl_config = runtime.pdl_launch_config(self.grid, cfg.threads, 0)
        self._pdl_config_ptr = ctypes.pointer(self._pdl_config)
        self._lock = threading.Lock()
        self._label = f"{KERNEL_NAME}, {cfg}"   # for errors; formatted once, not per launch

    def launch(self, a_ptr: int, b_ptr: int, sa_ptr: int, d_ptr: int, sb_ptr: int, layout_ptr: int,
               stream_ptr: int, d_scale_ptr: int = 0) -> None:
        with self._lock:
            for slot, value in zip(self._ptrs, (a_ptr, sa_ptr, b_ptr, sb_ptr, d_ptr)):
                slot.value = value
            runtime.launch_checked(self._launch, stream_ptr, self.kernel.device, self._label)

    def _launch(self, stream_ptr: int, pdl: bool) -> int:
        if pdl:
            self._pdl_config.stream = stream_ptr
            return self._cu_launch_ex(self._pdl_config_ptr, self._function, self._argv_addr, None)
        return self._cu_launch(self._function, self.grid, 1, 1, self.config.threads, 1, 1, 0, stream_ptr,
                               self._argv_addr, None)


def bind(cfg: SmallMConfig, a, a_scale, b, b_scale, out):
    """A callable that launches `cfg` on these arrays (a_scale in the TMA-aligned layout), for tools and tests;
    `run.launcher` is the SmallMLauncher."""
    m = a.shape[0]
    launcher = SmallMLauncher(cfg, a.data.device_id, m, a.strides[0], b.strides[0], get_tma_aligned_size(m, 4),
                              out.strides[0] // out.itemsize)

    def run(out=out, stream_ptr: int | None = None) -> None:
        launcher.launch(a.data.ptr, b.data.ptr, a_scale.data.ptr, out.data.ptr, b_scale.data.ptr, 0,
                        cupy.cuda.get_current_stream().ptr if stream_ptr is None else stream_ptr)

    run.launcher = launcher
    return run
