"""Driver-level work through cuda-python: the device's properties, loading cubins, TMA descriptors and
launching. The hot path (``GemmLauncher.launch``) does no allocation: tensor maps are cached per
problem geometry and only their global addresses are swapped (``cuTensorMapReplaceAddress``) when a
call brings new arrays; the kernel's argument array is packed once and reused."""
from __future__ import annotations

import ctypes
import functools
import threading

import cupy
from cuda.bindings import driver as cu

from . import kernels
from .heuristics import KernelConfig
from .layout import get_tma_aligned_size

_SUCCESS = cu.CUresult.CUDA_SUCCESS
_ERROR_INVALID_CONTEXT = int(cu.CUresult.CUDA_ERROR_INVALID_CONTEXT)


class CudaError(RuntimeError):
    pass


def _check(result, what: str):
    err = result[0]
    if err != _SUCCESS:
        _, msg = cu.cuGetErrorString(err)
        raise CudaError(f"{what} failed: {err.name}: {msg.decode() if msg else ''}")
    return result[1] if len(result) == 2 else result[1:]


# ----------------------------------------------------------------------------- devices
@functools.lru_cache(maxsize=None)
def device_properties(device: int) -> dict:
    props = cupy.cuda.runtime.getDeviceProperties(device)
    name = props["name"]
    return {
        "name": name.decode() if isinstance(name, bytes) else str(name),
        "cc": (int(props["major"]), int(props["minor"])),
        "num_sms": int(props["multiProcessorCount"]),
        "smem_optin": int(props["sharedMemPerBlockOptin"]),
    }


@functools.lru_cache(maxsize=None)
def require_hopper(device: int) -> None:
    props = device_properties(device)
    if props["cc"] != (9, 0):
        raise RuntimeError(f"cugemm8 needs a Hopper GPU (compute capability 9.0, sm_90a); device {device} "
                           f"({props['name']}) has compute capability {props['cc'][0]}.{props['cc'][1]}")


_num_sms_override: dict[int, int] = {}


def _device_arg(device) -> int:
    if device is None:
        return cupy.cuda.runtime.getDevice()
    if isinstance(device, bool) or not isinstance(device, int):
        raise TypeError(f"device must be an int device index or None; got {type(device).__name__}")
    if device < 0:
        raise ValueError(f"device must be a non-negative device index; got {device}")
    try:
        device_properties(device)
    except cupy.cuda.runtime.CUDARuntimeError as exc:
        raise ValueError(f"device {device} is not a visible GPU ({exc})") from exc
    return device


def get_num_sms(device: int | None = None) -> int:
    """SMs the GEMMs use on `device` (default: the current device)."""
    dev = _device_arg(device)
    return _num_sms_override.get(dev) or device_properties(dev)["num_sms"]


def set_num_sms(num_sms: int, device: int | None = None) -> None:
    """Cap the SMs the GEMMs use on `device` (default: the current device)."""
    dev = _device_arg(device)
    total = device_properties(dev)["num_sms"]
    if isinstance(num_sms, bool) or not isinstance(num_sms, int):
        raise TypeError(f"num_sms must be an int, got {type(num_sms).__name__}")
    if not 0 < num_sms <= total:
        raise ValueError(f"num_sms must be in [1, {total}] (the SM count of device {dev}), got {num_sms}")
    _num_sms_override[dev] = num_sms


# ----------------------------------------------------------------------------- kernels
_tls = threading.local()
_driver_ready = False


def _ensure_context(device: int, force: bool = False) -> None:
    """Make sure the device's primary context (the one CuPy uses) is current on this thread."""
    global _driver_ready
    ready = getattr(_tls, "devices", None)
    if ready is None:
        ready = _tls.devices = set()
    if device in ready and not force:
        return
    if not _driver_ready:
        _check(cu.cuInit(0), "cuInit")
        _driver_ready = True
    with cupy.cuda.Device(device):
        cupy.cuda.runtime.free(0)  # initializes the runtime's (primary) context on this thread
    ready.add(device)


class LoadedKernel:
    def __init__(self, cfg: KernelConfig, device: int, ffma: kernels.FfmaSpec = None):
        self.config = cfg
        self.device = device
        self.ffma = kernels.ffma_settings(ffma)   # the FFMA patch this module was built with
        cubin = kernels.build(cfg, ffma=self.ffma)
        _ensure_context(device)
        with cupy.cuda.Device(device):
            self.module = _check(cu.cuModuleLoadData(cubin), "cuModuleLoadData")
            self.function = _check(cu.cuModuleGetFunction(self.module, kernels.KERNEL_NAME.encode()),
                                   "cuModuleGetFunction")
            _check(cu.cuFuncSetAttribute(
                self.function, cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                cfg.smem_bytes), "cuFuncSetAttribute(max dynamic shared memory)")
            self.max_grid = self._max_cluster_grid() if cfg.cluster_dims > 1 else None

    def _max_cluster_grid(self) -> int:
        """CTAs of the clusters that can be resident at once. A persistent grid must not exceed it:
        a cluster waiting for SMs would start only when another finished, a whole tile sequence late."""
        cfg = self.config
        launch = cu.CUlaunchConfig()
        launch.gridDimX, launch.gridDimY, launch.gridDimZ = get_num_sms(self.device), 1, 1
        launch.blockDimX, launch.blockDimY, launch.blockDimZ = cfg.threads, 1, 1
        launch.sharedMemBytes = cfg.smem_bytes
        launch.numAttrs = 0   # the cluster size is compiled in (__cluster_dims__)
        clusters = _check(cu.cuOccupancyMaxActiveClusters(self.function, launch), "cuOccupancyMaxActiveClusters")
        if clusters < 1:
            raise CudaError(f"no cluster of {cfg.cluster_dims} CTAs of {cfg_str(cfg)} fits on device {self.device}")
        return clusters * cfg.cluster_dims


_kernels: dict[tuple[int, KernelConfig, kernels.FfmaSettings], LoadedKernel] = {}
_kernels_lock = threading.Lock()


def get_kernel(cfg: KernelConfig, device: int, ffma: kernels.FfmaSpec = None) -> LoadedKernel:
    """The loaded kernel for `cfg`; `ffma` picks the FFMA patch (None: the default policy, see
    kernels.ffma_settings)."""
    settings = kernels.ffma_settings(ffma)
    key = (device, cfg, settings)
    kern = _kernels.get(key)
    if kern is None:
        with _kernels_lock:
            kern = _kernels.get(key)
            if kern is None:
                kern = _kernels[key] = LoadedKernel(cfg, device, settings)
    return kern


# ----------------------------------------------------------------------------- the hot path
# The two driver calls made on every launch go through ctypes with fixed argument types: about 1 µs
# each, against several µs for cuda.bindings' general argument conversion.
_libcuda = None


def _libcuda_functions():
    global _libcuda
    if _libcuda is None:
        lib = ctypes.CDLL("libcuda.so.1")
        vp, u32 = ctypes.c_void_p, ctypes.c_uint
        lib.cuLaunchKernel.argtypes = [vp, u32, u32, u32, u32, u32, u32, u32, vp, vp, vp]
        lib.cuLaunchKernel.restype = ctypes.c_int
        lib.cuTensorMapReplaceAddress.argtypes = [vp, vp]
        lib.cuTensorMapReplaceAddress.restype = ctypes.c_int
        _libcuda = {"cuLaunchKernel": lib.cuLaunchKernel, "cuTensorMapReplaceAddress": lib.cuTensorMapReplaceAddress}
    return _libcuda


def _raise_driver_error(name: str, err: int) -> None:
    code = cu.CUresult(err)
    _, msg = cu.cuGetErrorString(code)
    raise CudaError(f"{name} failed: {code.name}: {msg.decode() if msg else ''}")


# ----------------------------------------------------------------------------- tensor maps
_DT = cu.CUtensorMapDataType
_SW = cu.CUtensorMapSwizzle
_SWIZZLE = {0: _SW.CU_TENSOR_MAP_SWIZZLE_NONE, 32: _SW.CU_TENSOR_MAP_SWIZZLE_32B,
            64: _SW.CU_TENSOR_MAP_SWIZZLE_64B, 128: _SW.CU_TENSOR_MAP_SWIZZLE_128B}


def encode_2d(dtype, ptr: int, inner: int, outer: int, row_stride_bytes: int, box_inner: int, box_outer: int,
              swizzle: int) -> cu.CUtensorMap:
    """A 2-D tiled tensor map: `inner` contiguous elements per row, `outer` rows."""
    u64, u32 = cu.cuuint64_t, cu.cuuint32_t
    return _check(cu.cuTensorMapEncodeTiled(
        dtype, 2, ptr, [u64(inner), u64(outer)], [u64(row_stride_bytes)], [u32(box_inner), u32(box_outer)],
        [u32(1), u32(1)], cu.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE, _SWIZZLE[swizzle],
        cu.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
        cu.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
        f"cuTensorMapEncodeTiled(dims=({inner}, {outer}), stride={row_stride_bytes}, box=({box_inner}, {box_outer}))")


def cfg_str(cfg: KernelConfig) -> str:
    return (f"{cfg.layout} N={cfg.n} K={cfg.k} G={cfg.num_groups} block {cfg.block_m}x{cfg.block_n}, "
            f"{cfg.stages} stages")


class GemmLauncher:
    """One kernel bound to one problem geometry: 4 tensor maps and the packed argument array.

    Geometry (what the maps encode besides addresses): rows of A/D, row strides of every operand.
    Addresses may change from call to call."""

    def __init__(self, kern: LoadedKernel, grid: int, rows: int, a_ld: int, b_ld: int, sa_ld: int, d_ld: int,
                 ptrs: tuple[int, int, int, int]):
        cfg = kern.config
        self.kernel = kern
        self.grid = grid if kern.max_grid is None else min(grid, kern.max_grid)
        kb = -(-cfg.k // 128)
        groups = cfg.num_groups
        # masked: A, its scales and D stack the groups ([G*max_m, ...]); B always stacks them.
        a_rows = rows * groups if cfg.layout == "masked" else rows
        sa_outer = kb * groups if cfg.layout == "masked" else kb
        sa_inner = rows
        atom_cols = cfg.swizzle_d // 2 if cfg.swizzle_d else cfg.block_n
        self.maps = (
            # With multicast each CTA of a pair loads half of the A tile (and of its scales).
            encode_2d(_DT.CU_TENSOR_MAP_DATA_TYPE_UINT8, ptrs[0], cfg.k, a_rows, a_ld, 128,
                      cfg.block_m // cfg.cluster, 128),
            encode_2d(_DT.CU_TENSOR_MAP_DATA_TYPE_UINT8, ptrs[1], cfg.k, cfg.n * groups, b_ld, 128, cfg.block_n,
                      128),
            encode_2d(_DT.CU_TENSOR_MAP_DATA_TYPE_FLOAT32, ptrs[2], sa_inner, sa_outer, sa_ld * 4,
                      cfg.block_m // cfg.cluster, 1, 0),
            encode_2d(_DT.CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, ptrs[3], cfg.n, a_rows, d_ld * 2, atom_cols,
                      min(cfg.block_m, a_rows), cfg.swizzle_d),
        )
        self.ptrs = list(ptrs)
        self._sb = ctypes.c_uint64(0)
        self._layout = ctypes.c_uint64(0)
        self._d = ctypes.c_uint64(ptrs[3])
        self._ldd = ctypes.c_uint32(d_ld)
        self._m = ctypes.c_uint32(rows)
        self._argv = (ctypes.c_void_p * 9)(
            *[int(m.getPtr()) for m in self.maps],
            ctypes.addressof(self._sb), ctypes.addressof(self._layout), ctypes.addressof(self._d),
            ctypes.addressof(self._ldd), ctypes.addressof(self._m))
        self._argv_addr = ctypes.addressof(self._argv)
        self._map_addrs = [int(m.getPtr()) for m in self.maps]
        self._function = int(kern.function)
        self._threads = cfg.threads
        self._smem = cfg.smem_bytes
        self._lock = threading.Lock()
        fns = _libcuda_functions()
        self._cu_launch, self._cu_replace = fns["cuLaunchKernel"], fns["cuTensorMapReplaceAddress"]

    def launch(self, a_ptr: int, b_ptr: int, sa_ptr: int, d_ptr: int, sb_ptr: int, layout_ptr: int,
               stream_ptr: int) -> None:
        with self._lock:
            ptrs = self.ptrs
            for i, p in enumerate((a_ptr, b_ptr, sa_ptr, d_ptr)):
                if ptrs[i] != p:
                    err = self._cu_replace(self._map_addrs[i], p)
                    if err:
                        _raise_driver_error("cuTensorMapReplaceAddress", err)
                    ptrs[i] = p
            self._sb.value = sb_ptr
            self._layout.value = layout_ptr
            self._d.value = d_ptr
            err = self._cu_launch(self._function, self.grid, 1, 1, self._threads, 1, 1, self._smem, stream_ptr,
                                  self._argv_addr, None)
            if err == _ERROR_INVALID_CONTEXT:  # first launch from a thread where CuPy made no context current
                _ensure_context(self.kernel.device, force=True)
                err = self._cu_launch(self._function, self.grid, 1, 1, self._threads, 1, 1, self._smem,
                                      stream_ptr, self._argv_addr, None)
        if err:
            _raise_driver_error(f"cuLaunchKernel({kernels.KERNEL_NAME}, {cfg_str(self.kernel.config)})", err)


_launchers: dict[tuple, GemmLauncher] = {}
_MAX_LAUNCHERS = 1024


def get_launcher(cfg: KernelConfig, device: int, grid: int, rows: int, a_ld: int, b_ld: int, sa_ld: int,
                 d_ld: int, ptrs: tuple[int, int, int, int], ffma: kernels.FfmaSpec = None) -> GemmLauncher:
    settings = kernels.ffma_settings(ffma)
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


def bind(cfg: KernelConfig, a, a_scale, b, b_scale, out, *, layout=None, grid: int | None = None, ffma=None):
    """A callable that launches one explicit configuration on these arrays, for tools and tests (the
    API chooses and caches its own). `a_scale` must be in the TMA-aligned layout; `layout` is
    m_indices or masked_m for the grouped layouts. `run(out=other)` writes another output of the same
    shape and strides; `run.launcher` is the GemmLauncher."""
    device = a.data.device_id
    rows = a.shape[-2]  # masked: max_m
    if grid is None:
        sms = get_num_sms(device)
        tiles = -(-rows // cfg.block_m) * cfg.num_n_blocks
        grid = sms if cfg.layout == "masked" else min(sms, tiles)
        grid -= grid % cfg.cluster_dims
    launcher = get_launcher(cfg, device, grid, rows, a.strides[-2], b.strides[-2], get_tma_aligned_size(rows, 4),
                            out.strides[-2] // 2, (a.data.ptr, b.data.ptr, a_scale.data.ptr, out.data.ptr), ffma=ffma)
    layout_ptr = 0 if layout is None else layout.data.ptr

    def run(out=out, stream_ptr: int | None = None) -> None:
        launcher.launch(a.data.ptr, b.data.ptr, a_scale.data.ptr, out.data.ptr, b_scale.data.ptr, layout_ptr,
                        cupy.cuda.get_current_stream().ptr if stream_ptr is None else stream_ptr)

    run.launcher = launcher
    return run
