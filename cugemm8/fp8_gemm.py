"""The GEMM kernel's host side: its source for one configuration, the cached and FFMA-patched cubin,
its tensor maps and packed arguments, and its launch.

The kernel lives in ``cuda_src/`` (entry ``fp8_gemm.cu``, and ``fp8_wgrad.cu`` for the weight gradient; the
parts under ``gemm/`` and ``ptx/``); ``render`` writes the small translation unit that fixes its compile-time
configuration.

The hot path (``GemmLauncher.launch``) allocates nothing: tensor maps are cached per problem
geometry and only their global addresses are swapped when a call brings new arrays; the argument
array is packed once and reused. (About 460 lines, one concern: the host side of one kernel family.)
"""
from __future__ import annotations

import ctypes
import threading
import warnings

import cupy

from . import ffma as _ffma
from . import jit, runtime
from .ffma import FfmaSettings, FfmaSpec, ffma_settings
from .heuristics import BLOCK_K, CONTIGUOUS_M_ALIGNMENT, KernelConfig, grid_for, permutes_b
from .layout import get_tma_aligned_size

KERNEL_NAME = "cugemm8_fp8_gemm"
WGRAD_KERNEL_NAME = "cugemm8_fp8_wgrad"


def kernel_name(cfg: KernelConfig) -> str:
    """The entry point of `cfg`'s kernel: the weight gradient's or the forward GEMMs'."""
    return WGRAD_KERNEL_NAME if cfg.wgrad else KERNEL_NAME


def entry_source(cfg: KernelConfig) -> str:
    """The file under cuda_src/ that defines kernel_name(cfg)."""
    return "fp8_wgrad.cu" if cfg.wgrad else "fp8_gemm.cu"


_LAYOUTS = {"normal": "Layout::kNormal", "contiguous": "Layout::kContiguous", "masked": "Layout::kMasked",
            "k_grouped": "Layout::kKGrouped"}
_OUT_FORMATS = {"bfloat16": "cg8::OutFormat::kBf16", "float8_e4m3": "cg8::OutFormat::kE4m3",
                "float8_e4m3_ue8m0": "cg8::OutFormat::kE4m3Ue8m0"}


def config_type(cfg: KernelConfig) -> str:
    """The GemmConfig (cuda_src/gemm/config.cuh) of one configuration, as a qualified C++ type."""
    params = ["cg8::" + _LAYOUTS[cfg.layout], cfg.n, cfg.k, cfg.num_groups, cfg.block_m, cfg.block_n, cfg.stages,
              cfg.num_math_wg, cfg.swizzle_d, cfg.raster_group, cfg.cluster, "true" if cfg.tail_split else "false",
              cfg.record_slots, cfg.split_k, "true" if cfg.stream_b else "false"]
    if cfg.wgrad:  # FP32 added into D, with 1x128 B scales (and K at run time: k == 0)
        params += ["cg8::OutFormat::kF32Add", "cg8::ScaleB::kRow", cfg.d_atoms]
        if cfg.transpose_d or cfg.load_d:  # (group_ctas, share_b and col_halves at their defaults)
            params += [1, "false", 1, "true" if cfg.transpose_d else "false"]
        if cfg.load_d:
            params.append("true")
    elif cfg.out_fp8 or cfg.share_b or cfg.col_halves > 1:  # the defaults are left out, so older sources (and
        params.append(_OUT_FORMATS[cfg.out_format])           # cache keys) read as before
        if cfg.group_ctas > 1 or cfg.share_b or cfg.col_halves > 1:  # (the parameters before them at their defaults)
            params += ["cg8::ScaleB::kBlock", 0, cfg.group_ctas]
        if cfg.share_b or cfg.col_halves > 1:
            params.append("true" if cfg.share_b else "false")
        if cfg.col_halves > 1:
            params.append(cfg.col_halves)
    return f"cg8::GemmConfig<{', '.join(map(str, params))}>"


def render(cfg: KernelConfig) -> str:
    """The translation unit of one configuration: `cg8::Config` (the GemmConfig of cuda_src/gemm/config.cuh),
    the cluster attribute where clusters are launched, the kernel, and compile-time checks that the CUDA
    side agrees with this package on BLOCK_K, the contiguous alignment, the shared-memory size and (e4m3 output) B's
    row order."""
    lines = ['#include "gemm/config.cuh"', f"namespace cg8 {{ using Config = {config_type(cfg)}; }}"]
    if cfg.cluster_dims > 1:
        lines.append(f"#define CG8_CLUSTER_DIMS __cluster_dims__({cfg.cluster_dims}, 1, 1)")
    lines += [f'#include "{entry_source(cfg)}"',
              f'static_assert(cg8::kBlockK == {BLOCK_K}, "BLOCK_K differs from cugemm8.heuristics");',
              f'static_assert(cg8::kSlabRows == {CONTIGUOUS_M_ALIGNMENT}, '
              '"the contiguous alignment is the slab height");',
              f'static_assert(cg8::SmemLayout<cg8::Config>::kBytes == {cfg.smem_bytes}, '
              '"shared memory differs from cugemm8.heuristics.smem_bytes");']
    if cfg.out_fp8:  # (the other kernels' sources read as before)
        lines.append(f'static_assert(cg8::Config::kPermuteB == {"true" if permutes_b(cfg) else "false"}, '
                     '"B\'s row order differs from cugemm8.heuristics.permutes_b");')
    lines.append("")
    return "\n".join(lines)


# ----------------------------------------------------------------------------- the cubin
_printed: set[tuple[str, str]] = set()   # (source, patch_version) already reported in this process


def build(cfg: KernelConfig, *, ffma: FfmaSpec = None) -> bytes:
    """The cubin for `cfg` (cached in memory and on disk), FFMA-patched per `ffma` (see ffma.ffma_settings)."""
    settings = ffma_settings(ffma)
    source, name = render(cfg), f"{kernel_name(cfg)}.cu"
    if not settings.enabled:
        return jit.build(source, name=name, patch_version=settings.patch_version)
    verbose = _ffma.print_patch_enabled()
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
        if not ran:
            _report_cached_patch(cfg, source, name, settings)
    return cubin


def _report_cached_patch(cfg: KernelConfig, source: str, name: str, settings: FfmaSettings) -> None:
    """Print the patch of a cubin that came from a cache, by patching its unpatched build again (deterministic)."""
    print(f"cugemm8 ffma: {cfg} ({settings.patch_version}) came from the JIT cache; its patch was:")
    plain = jit.build(source, name=name, patch_version="off")
    try:
        _ffma.interleave(plain, settings.fraction, keep_compiler_yields=settings.keep_compiler_yields, verbose=True)
    except _ffma.FfmaPatchError as exc:
        print(f"cugemm8 ffma: left unpatched: {exc}")


def cfg_str(cfg: KernelConfig) -> str:
    if cfg.wgrad:
        return (f"wgrad {cfg.layout} N={cfg.n} G={cfg.num_groups} block {cfg.block_m}x{cfg.block_n}, "
                f"{cfg.stages} stages" + (", D transposed" if cfg.transpose_d else "")
                + (", D loaded and stored" if cfg.load_d else ""))
    return (f"{cfg.layout} N={cfg.n} K={cfg.k} G={cfg.num_groups} block {cfg.block_m}x{cfg.block_n}, "
            f"{cfg.stages} stages" + (f", {cfg.out_format} out" if cfg.out_fp8 else "")
            + (f", {cfg.group_ctas} CTAs a scale group" if cfg.group_ctas > 1 else "")
            + (", pairs sharing B" if cfg.share_b else ", pairs sharing A" if cfg.cluster > 1 else "")
            + (", column halves" if cfg.col_halves > 1 else ""))


class LoadedKernel(runtime.LoadedFunction):
    """The kernel of one configuration, loaded on one device, built with one FFMA patch."""

    def __init__(self, cfg: KernelConfig, device: int, ffma: FfmaSpec = None):
        self.config = cfg
        self.ffma = ffma_settings(ffma)
        super().__init__(build(cfg, ffma=self.ffma), kernel_name(cfg), device, cfg.smem_bytes, cfg.threads,
                         cfg.cluster_dims, cfg_str(cfg))


_kernels: dict[tuple[int, KernelConfig, FfmaSettings], LoadedKernel] = {}
_kernels_lock = threading.Lock()


def get_kernel(cfg: KernelConfig, device: int, ffma: FfmaSpec = None) -> LoadedKernel:
    """The loaded kernel for `cfg`; `ffma` picks the FFMA patch (None: the default policy, see
    ffma.ffma_settings)."""
    settings = ffma_settings(ffma)
    key = (device, cfg, settings)
    kern = _kernels.get(key)
    if kern is None:
        with _kernels_lock:
            kern = _kernels.get(key)
            if kern is None:
                kern = _kernels[key] = LoadedKernel(cfg, device, settings)
    return kern


# ----------------------------------------------------------------------------- arguments and launch
def a_boxes(cfg: KernelConfig, rows: int) -> tuple[int, int]:
    """Rows of A's TMA boxes, and (rounded up to 4, TMA's 16 bytes) of its scales' boxes: the main maps' and the
    tail maps', which a last m-block of fewer rows than a tile, after others, loads through. The kernel expects
    the same bytes per stage (TilePolicy::rows_a_landing and tail_maps in cuda_src/gemm/policy_*.cuh). The
    normal layout's tiles load no rows past A's end (NOTES.md v18, v46); a pair sharing A loads half a tile
    each; the other layouts load whole tiles."""
    if cfg.cluster > 1 and not cfg.share_b:
        return cfg.block_m // cfg.cluster, cfg.block_m // cfg.cluster
    if cfg.layout == "normal":
        last = rows % cfg.block_m
        return min(rows, cfg.block_m), last if rows > cfg.block_m and last else min(rows, cfg.block_m)
    return cfg.block_m, cfg.block_m


def _a_maps(a_ptr: int, sa_ptr: int, k: int, a_rows: int, a_ld: int, sa_inner: int,
            sa_outer: int, sa_ld: int, box: int) -> tuple:
    """A's map and its scales' (M-major: sa_inner rows a k-block, sa_ld floats apart) with boxes of `box` rows."""
    dt = runtime.TMA_DTYPE
    return (runtime.encode_2d(dt.CU_TENSOR_MAP_DATA_TYPE_UINT8, a_ptr, k, a_rows, a_ld, BLOCK_K, box, 128),
            runtime.encode_2d(dt.CU_TENSOR_MAP_DATA_TYPE_FLOAT32, sa_ptr, sa_inner, sa_outer, sa_ld * 4,
                              -(-box // 4) * 4, 1, 0))


def tensor_maps(cfg: KernelConfig, rows: int, a_ld: int, b_ld: int, sa_ld: int, d_ld: int,
                ptrs: tuple[int, int, int, int]) -> tuple:
    """The kernel's 6 tensor maps for `rows` rows of A and D and these leading dimensions (A and B in bytes, the
    scales and D in elements; D holds bf16 or e4m3 bytes): A, B, A's scales, D, then A and its scales with the
    tail boxes (a_boxes; the main maps themselves where the boxes agree)."""
    dt = runtime.TMA_DTYPE
    kb = -(-cfg.k // BLOCK_K)
    groups = cfg.num_groups
    # masked: A, its scales and D stack the groups ([G*max_m, ...]); B always stacks them.
    a_rows = rows * groups if cfg.layout == "masked" else rows
    sa_outer = kb * groups if cfg.layout == "masked" else kb
    out_bytes = 1 if cfg.out_fp8 else 2
    atom_cols = cfg.swizzle_d // out_bytes if cfg.swizzle_d else cfg.block_n
    d_type = dt.CU_TENSOR_MAP_DATA_TYPE_UINT8 if cfg.out_fp8 else dt.CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
    box, tail = a_boxes(cfg, rows)
    map_a, map_sa = _a_maps(ptrs[0], ptrs[2], cfg.k, a_rows, a_ld, rows, sa_outer, sa_ld, box)
    return (
        map_a,
        _b_map(cfg, ptrs[1], groups, b_ld),
        map_sa,
        runtime.encode_2d(d_type, ptrs[3], cfg.n, a_rows, d_ld * out_bytes, atom_cols, min(cfg.block_m, a_rows),
                          cfg.swizzle_d),
        *((map_a, map_sa) if tail == box else _a_maps(ptrs[0], ptrs[2], cfg.k, a_rows, a_ld, rows, sa_outer,
                                                       sa_ld, tail)),
    )


def _b_map(cfg: KernelConfig, ptr: int, groups: int, b_ld: int):
    """B's tensor map: boxes of BLOCK_K x block_n rows (pairs sharing B: half tiles), or with heuristics.permutes_b
    the rows of each 64-row block in the accumulator's fragment order: row 16 q + 2 j + a of the block lands as row
    8 j + 2 q + a (a 5-D box: a, q, j, then the blocks), so that a thread's 16 values of an output row are 16 adjacent
    columns (cuda_src/gemm/epilogue.cuh, write_rows)."""
    u8 = runtime.TMA_DTYPE.CU_TENSOR_MAP_DATA_TYPE_UINT8
    if permutes_b(cfg):
        return runtime.encode_nd(u8, ptr, (cfg.k, 2, 4, 8, cfg.n * groups // 64), (b_ld, 16 * b_ld, 2 * b_ld, 64 * b_ld),
                                 (BLOCK_K, 2, 4, 8, cfg.block_n // 64), 128)
    return runtime.encode_2d(u8, ptr, cfg.k, cfg.n * groups, b_ld, BLOCK_K,
                             cfg.block_n // 2 if cfg.share_b else cfg.block_n, 128)


class GemmLauncher:
    """One kernel bound to one problem geometry: 6 tensor maps and the packed argument array.

    Geometry (what the maps encode besides addresses): rows of A/D, row strides of every operand.
    Addresses may change from call to call."""

    def __init__(self, kern: LoadedKernel, grid: int, rows: int, a_ld: int, b_ld: int, sa_ld: int, d_ld: int,
                 ptrs: tuple[int, int, int, int]):
        self._bind(kern, grid, tensor_maps(kern.config, rows, a_ld, b_ld, sa_ld, d_ld, ptrs), (*ptrs, ptrs[0], ptrs[2]))
        self._pack_arguments(ptrs[3], d_ld, rows)

    def _bind(self, kern: LoadedKernel, grid: int, maps: tuple, ptrs: tuple) -> None:
        """The kernel, its grid (capped for clusters), its tensor maps (one a map parameter; the tail maps may be
        the main ones) and their current addresses, and what a launch needs; the arguments are packed by the
        caller."""
        cfg = kern.config
        self.kernel = kern
        self.grid = grid if kern.max_grid is None else min(grid, kern.max_grid)
        self.maps = maps
        self.ptrs = list(ptrs)
        self._map_addrs = [int(m.getPtr()) for m in self.maps]
        self._distinct = [i for i, addr in enumerate(self._map_addrs) if addr not in self._map_addrs[:i]]
        self._function = int(kern.function)
        self._threads = cfg.threads
        self._smem = cfg.smem_bytes
        self._lock = threading.Lock()
        self._label = f"{kernel_name(cfg)}, {cfg_str(cfg)}"   # for errors; formatted once, not per launch
        fns = runtime.libcuda_functions()
        self._cu_launch, self._cu_replace = fns["cuLaunchKernel"], fns["cuTensorMapReplaceAddress"]
        self._cu_launch_ex = fns["cuLaunchKernelEx"]
        self._pdl_config = runtime.pdl_launch_config(self.grid, self._threads, self._smem)
        self._pdl_config_ptr = ctypes.pointer(self._pdl_config)

    def _pack_arguments(self, d_ptr: int, d_ld: int, rows: int) -> None:
        """The kernel's parameters, in order: tmap_a, tmap_b, tmap_sa, tmap_d, tmap_a_tail, tmap_sa_tail (by
        address), then the B-scale pointer, the layout pointer (m_indices or masked_m; 0 for dense), the D pointer,
        D's leading dimension (u32), M (u32), and for e4m3 output its scales' pointer and leading dimension
        (u32: rows rounded up to 4, as A's scales; unused for bf16). launch() rewrites the four pointers."""
        self._sb = ctypes.c_uint64(0)
        self._layout = ctypes.c_uint64(0)
        self._d = ctypes.c_uint64(d_ptr)
        self._ldd = ctypes.c_uint32(d_ld)
        self._m = ctypes.c_uint32(rows)
        self._d_scale = ctypes.c_uint64(0)
        self._ld_scale = ctypes.c_uint32(get_tma_aligned_size(rows, 4))
        self._argv = (ctypes.c_void_p * 13)(
            *self._map_addrs,
            ctypes.addressof(self._sb), ctypes.addressof(self._layout), ctypes.addressof(self._d),
            ctypes.addressof(self._ldd), ctypes.addressof(self._m), ctypes.addressof(self._d_scale),
            ctypes.addressof(self._ld_scale))
        self._argv_addr = ctypes.addressof(self._argv)

    def launch(self, a_ptr: int, b_ptr: int, sa_ptr: int, d_ptr: int, sb_ptr: int, layout_ptr: int,
               stream_ptr: int, d_scale_ptr: int = 0) -> None:
        with self._lock:
            self._sb.value = sb_ptr
            self._layout.value = layout_ptr
            self._d.value = d_ptr
            self._d_scale.value = d_scale_ptr
            self._swap_and_launch((a_ptr, b_ptr, sa_ptr, d_ptr, a_ptr, sa_ptr), stream_ptr)

    def _swap_and_launch(self, map_ptrs: tuple, stream_ptr: int) -> None:
        """Swap the tensor maps' addresses that changed (in the order of self.maps; a map passed twice is swapped
        once), then launch; the caller holds the lock and has set the scalar arguments."""
        ptrs = self.ptrs
        for i in self._distinct:
            p = map_ptrs[i]
            if ptrs[i] != p:
                err = self._cu_replace(self._map_addrs[i], p)
                if err:
                    runtime.raise_driver_error("cuTensorMapReplaceAddress", err)
                ptrs[i] = p
        runtime.launch_checked(self._launch, stream_ptr, self.kernel.device, self._label)

    def _launch(self, stream_ptr: int, pdl: bool) -> int:
        if pdl:  # programmatic dependent launch (runtime.set_pdl): the attribute needs cuLaunchKernelEx
            self._pdl_config.stream = stream_ptr
            return self._cu_launch_ex(self._pdl_config_ptr, self._function, self._argv_addr, None)
        return self._cu_launch(self._function, self.grid, 1, 1, self._threads, 1, 1, self._smem, stream_ptr,
                               self._argv_addr, None)


_launchers: dict[tuple, GemmLauncher] = {}
_MAX_LAUNCHERS = 1024


def get_launcher(cfg: KernelConfig, device: int, grid: int, rows: int, a_ld: int, b_ld: int, sa_ld: int,
                 d_ld: int, ptrs: tuple[int, int, int, int], ffma: FfmaSpec = None) -> GemmLauncher:
    """The launcher of `cfg` for this geometry, cached (the least recently created goes first)."""
    settings = ffma_settings(ffma)
    key = (device, cfg, grid, rows, a_ld, b_ld, sa_ld, d_ld, settings)
    launcher = _launchers.get(key)
    if launcher is None:
        kern = get_kernel(cfg, device, settings)
        with cupy.cuda.Device(device):
            launcher = GemmLauncher(kern, grid, rows, a_ld, b_ld, sa_ld, d_ld, ptrs)
        if len(_launchers) >= _MAX_LAUNCHERS:
            _launchers.pop(next(iter(_launchers)))
        _launchers[key] = launcher
    return launcher


def bind(cfg: KernelConfig, a, a_scale, b, b_scale, out, *, layout=None, grid: int | None = None, ffma=None,
         out_scale=None):
    """A callable that launches one explicit configuration on these arrays, for tools and tests (the
    API chooses and caches its own). `a_scale` must be in the TMA-aligned layout; `layout` is
    m_indices or masked_m for the grouped layouts; e4m3 output (cfg.out_format) writes `out` (uint8) and
    `out_scale` (float32, the TMA-aligned layout). `run(out=other)` writes another output of the same
    shape and strides; `run.launcher` is the GemmLauncher."""
    device = a.data.device_id
    rows = a.shape[-2]  # masked: max_m
    if grid is None:
        tiles = -(-rows // cfg.block_m) * cfg.num_n_blocks * (cfg.num_groups if cfg.layout == "masked" else 1)
        grid = grid_for(cfg, tiles, runtime.get_num_sms(device))
    launcher = get_launcher(cfg, device, grid, rows, a.strides[-2], b.strides[-2], get_tma_aligned_size(rows, 4),
                            out.strides[-2] // out.itemsize, (a.data.ptr, b.data.ptr, a_scale.data.ptr, out.data.ptr),
                            ffma=ffma)
    layout_ptr = 0 if layout is None else layout.data.ptr
    scale_ptr = 0 if out_scale is None else out_scale.data.ptr

    def run(out=out, stream_ptr: int | None = None) -> None:
        launcher.launch(a.data.ptr, b.data.ptr, a_scale.data.ptr, out.data.ptr, b_scale.data.ptr, layout_ptr,
                        cupy.cuda.get_current_stream().ptr if stream_ptr is None else stream_ptr, scale_ptr)

    run.launcher = launcher
    run.arrays = (layout, out_scale)  # read by the launch through their pointers only: kept alive with the callable
    return run


# ----------------------------------------------------------------------------- the weight gradient
def wgrad_tensor_maps(cfg: KernelConfig, m: int, k: int, groups: int, a_ld: int, b_ld: int, d_ld: int, d_gld: int,
                      ptrs: tuple) -> tuple:
    """The weight-gradient kernel's 7 tensor maps (cuda_src/fp8_wgrad.cu), in the kernel's view: its A [m, k]
    and B [N, k] (bytes, row strides a_ld and b_ld), their scales M-major as A's ([ceil(k/128)][rows rounded up
    to 4] floats), D as [groups][m][N] FP32 (row stride d_ld, group stride d_gld, in elements; transposed:
    [groups][N][m]), then A and its scales with the tail boxes (a_boxes; the main maps themselves where the boxes
    agree)."""
    dt = runtime.TMA_DTYPE
    kb = -(-k // BLOCK_K)
    box, tail = a_boxes(cfg, m)
    sa_ld = get_tma_aligned_size(m, 4)
    f32 = dt.CU_TENSOR_MAP_DATA_TYPE_FLOAT32
    map_a, map_sa = _a_maps(ptrs[0], ptrs[2], k, m, a_ld, m, kb, sa_ld, box)
    # D's box: 32 columns (the swizzle span) by the tile's rows, or by its columns where the tile lands transposed.
    d_rows, d_cols, box_rows = (cfg.n, m, cfg.block_n) if cfg.transpose_d else (m, cfg.n, cfg.block_m)
    return (
        map_a,
        runtime.encode_2d(dt.CU_TENSOR_MAP_DATA_TYPE_UINT8, ptrs[1], k, cfg.n, b_ld, BLOCK_K, cfg.block_n, 128),
        map_sa,
        runtime.encode_2d(f32, ptrs[3], cfg.n, kb, get_tma_aligned_size(cfg.n, 4) * 4, cfg.block_n, 1, 0),
        runtime.encode_nd(f32, ptrs[4], (d_cols, d_rows, groups), (d_ld * 4, d_gld * 4),
                          (cfg.swizzle_d // 4, min(box_rows, d_rows), 1), cfg.swizzle_d),
        *((map_a, map_sa) if tail == box else _a_maps(ptrs[0], ptrs[2], k, m, a_ld, m, kb, sa_ld, tail)),
    )


class WgradLauncher(GemmLauncher):
    """The weight-gradient kernel bound to one geometry (D's rows M and columns N, columns K of A and B, groups,
    row strides): 7 tensor maps and the packed arguments tmap_a, tmap_b, tmap_sa, tmap_sb, tmap_d, tmap_a_tail,
    tmap_sa_tail, the k-sizes pointer, the kernel's rows and K (u32). Addresses may change from call to call, as
    GemmLauncher's. Where the configuration computes D^T (cfg.transpose_d), this is the one place that swaps the
    operands: the kernel's A is B, with N rows."""

    def __init__(self, kern: LoadedKernel, grid: int, m: int, n: int, k: int, groups: int, a_ld: int, b_ld: int,
                 d_ld: int, d_gld: int, ptrs: tuple):
        self._transposed = kern.config.transpose_d
        rows, a_ld, b_ld = (n, b_ld, a_ld) if self._transposed else (m, a_ld, b_ld)
        ptrs = self._kernel_order(*ptrs)
        self._bind(kern, grid, wgrad_tensor_maps(kern.config, rows, k, groups, a_ld, b_ld, d_ld, d_gld, ptrs),
                   (*ptrs, ptrs[0], ptrs[2]))
        self._layout = ctypes.c_uint64(0)
        self._m, self._k = ctypes.c_uint32(rows), ctypes.c_uint32(k)
        self._argv = (ctypes.c_void_p * 10)(*self._map_addrs, ctypes.addressof(self._layout),
                                           ctypes.addressof(self._m), ctypes.addressof(self._k))
        self._argv_addr = ctypes.addressof(self._argv)

    def _kernel_order(self, a_ptr: int, b_ptr: int, sa_ptr: int, sb_ptr: int, d_ptr: int) -> tuple:
        """The problem's (A, B, A's scales, B's scales, D) as the kernel's operands."""
        return (b_ptr, a_ptr, sb_ptr, sa_ptr, d_ptr) if self._transposed else (a_ptr, b_ptr, sa_ptr, sb_ptr, d_ptr)

    def launch(self, a_ptr: int, b_ptr: int, sa_ptr: int, sb_ptr: int, d_ptr: int, k_sizes_ptr: int,
               stream_ptr: int) -> None:
        a_ptr, b_ptr, sa_ptr, sb_ptr, d_ptr = self._kernel_order(a_ptr, b_ptr, sa_ptr, sb_ptr, d_ptr)
        with self._lock:
            self._layout.value = k_sizes_ptr
            self._swap_and_launch((a_ptr, b_ptr, sa_ptr, sb_ptr, d_ptr, a_ptr, sa_ptr), stream_ptr)


def get_wgrad_launcher(cfg: KernelConfig, device: int, grid: int, m: int, n: int, k: int, groups: int, a_ld: int,
                       b_ld: int, d_ld: int, d_gld: int, ptrs: tuple) -> WgradLauncher:
    """The weight-gradient launcher of `cfg` for this geometry (D is M x N), cached with the forward launchers."""
    key = ("wgrad", device, cfg, grid, m, n, k, groups, a_ld, b_ld, d_ld, d_gld)
    launcher = _launchers.get(key)
    if launcher is None:
        kern = get_kernel(cfg, device)
        with cupy.cuda.Device(device):
            launcher = WgradLauncher(kern, grid, m, n, k, groups, a_ld, b_ld, d_ld, d_gld, ptrs)
        if len(_launchers) >= _MAX_LAUNCHERS:
            _launchers.pop(next(iter(_launchers)))
        _launchers[key] = launcher
    return launcher


def bind_wgrad(cfg: KernelConfig, a, a_scale, b, b_scale, out, *, k_sizes=None, grid: int | None = None):
    """A callable that launches one explicit weight-gradient configuration (out += A·Bᵀ, per group with
    `k_sizes`), for tools and tests. The scales must be in the TMA-aligned layout (a_scale [M, kb], b_scale
    [N, kb]); `out` is float32 [M, N] or [G, M, N]. The arrays are the problem's whichever way `cfg` computes it
    (cfg.transpose_d: the launcher swaps the operands)."""
    device = a.data.device_id
    (m, k), n = a.shape, b.shape[0]
    groups = cfg.num_groups if cfg.layout == "k_grouped" else 1
    if grid is None:
        tiles = -(-(n if cfg.transpose_d else m) // cfg.block_m) * cfg.num_n_blocks * groups
        grid = grid_for(cfg, tiles, runtime.get_num_sms(device))
    d_gld = out.strides[0] // 4 if out.ndim == 3 else m * (out.strides[0] // 4)
    launcher = get_wgrad_launcher(cfg, device, grid, m, n, k, groups, a.strides[0], b.strides[0],
                                  out.strides[-2] // 4, d_gld,
                                  (a.data.ptr, b.data.ptr, a_scale.data.ptr, b_scale.data.ptr, out.data.ptr))
    k_ptr = 0 if k_sizes is None else k_sizes.data.ptr

    def run(stream_ptr: int | None = None) -> None:
        launcher.launch(a.data.ptr, b.data.ptr, a_scale.data.ptr, b_scale.data.ptr, out.data.ptr, k_ptr,
                        cupy.cuda.get_current_stream().ptr if stream_ptr is None else stream_ptr)

    run.launcher = launcher
    run.arrays = (k_sizes,)  # read by the launch through its pointer only: kept alive with the callable
    return run
