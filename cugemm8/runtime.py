"""Driver-level work through cuda-python, for any kernel: the device's properties and SM count, the
current context, loading a cubin's function, TMA descriptors, and the two ctypes-bound driver calls
of the hot path (a launch and a descriptor's address swap). The GEMM kernel's own parameters and
launch live in ``cugemm8.fp8_gemm``."""
from __future__ import annotations

import ctypes
import functools
import threading

import cupy
from cuda.bindings import driver as cu

from .errors import CudaError

_SUCCESS = cu.CUresult.CUDA_SUCCESS
ERROR_INVALID_CONTEXT = int(cu.CUresult.CUDA_ERROR_INVALID_CONTEXT)


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


def gpu_unavailable_reason() -> str | None:
    """None when device 0 is a usable Hopper GPU; otherwise one sentence saying why not: no driver, a driver too
    old for this install's CUDA (and which extra fits it), no visible device, or another GPU."""
    try:
        err, = cu.cuInit(0)
    except Exception as exc:   # cuda.bindings could not load libcuda
        return f"no NVIDIA driver found ({exc})"
    if err == cu.CUresult.CUDA_ERROR_NO_DEVICE:
        return "the NVIDIA driver sees no GPU (check CUDA_VISIBLE_DEVICES and the container's device access)"
    if err != _SUCCESS:
        return f"the NVIDIA driver could not start: {err.name}"
    driver = _version(cu.cuDriverGetVersion()[1])
    try:
        needed = _version(cupy.cuda.runtime.runtimeGetVersion())
    except Exception:
        needed = None
    if needed and driver[0] < needed[0]:
        extra = {12: "cugemm8[cu12]"}.get(driver[0])
        fix = f"install {extra}, or update the driver" if extra and driver >= (12, 8) else "update the driver"
        return (f"the driver supports CUDA {driver[0]}.{driver[1]} but this install's CuPy needs CUDA "
                f"{needed[0]}.{needed[1]}: {fix}")
    err, count = cu.cuDeviceGetCount()
    if err != _SUCCESS or count < 1:
        return "the NVIDIA driver sees no GPU (check CUDA_VISIBLE_DEVICES and the container's device access)"
    err, dev = cu.cuDeviceGet(0)
    attr = cu.CUdevice_attribute
    major = cu.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev)[1]
    minor = cu.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev)[1]
    if (major, minor) != (9, 0):
        name = cu.cuDeviceGetName(256, dev)[1].split(b"\0")[0].decode(errors="replace")
        return f"device 0 ({name}) has compute capability {major}.{minor}; cugemm8 needs Hopper (9.0, sm_90a)"
    return None


def _version(v: int) -> tuple[int, int]:
    """A CUDA version int (12080) as (12, 8)."""
    return v // 1000, (v % 1000) // 10


def current_device() -> int:
    """CuPy's current device. A driver problem (no driver, one too old for this install's CUDA) becomes a
    CudaError that says why and what to install, instead of cudaErrorInsufficientDriver."""
    try:
        return cupy.cuda.runtime.getDevice()
    except cupy.cuda.runtime.CUDARuntimeError as exc:
        reason = gpu_unavailable_reason()
        raise CudaError(f"no usable GPU: {reason or exc}") from exc


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


# ----------------------------------------------------------------------------- contexts and modules
_tls = threading.local()
_driver_ready = False


def ensure_context(device: int, force: bool = False) -> None:
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


class LoadedFunction:
    """One function of a cubin, loaded on one device with its dynamic shared memory opted into.

    ``max_grid``: for a kernel launched in clusters, the most CTAs that can be resident at once (a
    persistent grid must not exceed it); None otherwise. ``label`` names the kernel in errors."""

    def __init__(self, cubin: bytes, name: str, device: int, smem_bytes: int, threads: int, cluster_dims: int,
                 label: str):
        self.device = device
        ensure_context(device)
        with cupy.cuda.Device(device):
            self.module = _check(cu.cuModuleLoadData(cubin), "cuModuleLoadData")
            self.function = _check(cu.cuModuleGetFunction(self.module, name.encode()), "cuModuleGetFunction")
            _check(cu.cuFuncSetAttribute(
                self.function, cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                smem_bytes), "cuFuncSetAttribute(max dynamic shared memory)")
            self.max_grid = (_max_cluster_grid(self.function, device, smem_bytes, threads, cluster_dims, label)
                             if cluster_dims > 1 else None)


def _max_cluster_grid(function, device: int, smem_bytes: int, threads: int, cluster_dims: int, label: str) -> int:
    """CTAs of the clusters that can be resident at once. A persistent grid must not exceed it:
    a cluster waiting for SMs would start only when another finished, a whole tile sequence late."""
    launch = cu.CUlaunchConfig()
    sms = device_properties(device)["num_sms"]
    launch.gridDimX, launch.gridDimY, launch.gridDimZ = max(sms - sms % cluster_dims, cluster_dims), 1, 1
    launch.blockDimX, launch.blockDimY, launch.blockDimZ = threads, 1, 1
    launch.sharedMemBytes = smem_bytes
    launch.numAttrs = 0   # the cluster size is compiled in (__cluster_dims__)
    clusters = _check(cu.cuOccupancyMaxActiveClusters(function, launch), "cuOccupancyMaxActiveClusters")
    if clusters < 1:
        raise CudaError(f"no cluster of {cluster_dims} CTAs of {label} fits on device {device}")
    return clusters * cluster_dims


# ----------------------------------------------------------------------------- programmatic dependent launch
_pdl = False


def set_pdl(enabled: bool) -> None:
    """Launch the GEMMs with programmatic dependent launch (off by default): a GEMM may then start while
    the previous kernel on its stream finishes, its CTAs setting up (barriers, descriptor prefetch) until
    that kernel's results are visible. It pays in chains of short kernels (decode)."""
    global _pdl
    if not isinstance(enabled, bool):
        raise TypeError(f"enabled must be a bool, got {type(enabled).__name__}")
    _pdl = enabled


def get_pdl() -> bool:
    """Whether the GEMMs are launched with programmatic dependent launch (set_pdl)."""
    return _pdl


# ----------------------------------------------------------------------------- the hot path
# The two driver calls made on every launch go through ctypes with fixed argument types, which costs
# far less than cuda.bindings' general argument conversion.
_libcuda = None


class LaunchAttribute(ctypes.Structure):
    """CUlaunchAttribute: an id, padding to 8 bytes, and a 64-byte value union (its first int used here)."""
    _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_char * 4), ("value", ctypes.c_int), ("rest", ctypes.c_char * 60)]


class LaunchConfig(ctypes.Structure):
    """CUlaunchConfig, for cuLaunchKernelEx."""
    _fields_ = [("grid", ctypes.c_uint * 3), ("block", ctypes.c_uint * 3), ("shared_mem_bytes", ctypes.c_uint),
                ("stream", ctypes.c_void_p), ("attrs", ctypes.POINTER(LaunchAttribute)), ("num_attrs", ctypes.c_uint)]


ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION = int(
    cu.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION)


def libcuda_functions() -> dict:
    """``cuLaunchKernel``, ``cuLaunchKernelEx`` and ``cuTensorMapReplaceAddress`` as ctypes functions (they
    return the error code)."""
    global _libcuda
    if _libcuda is None:
        lib = ctypes.CDLL("libcuda.so.1")
        vp, u32 = ctypes.c_void_p, ctypes.c_uint
        lib.cuLaunchKernel.argtypes = [vp, u32, u32, u32, u32, u32, u32, u32, vp, vp, vp]
        lib.cuLaunchKernel.restype = ctypes.c_int
        lib.cuLaunchKernelEx.argtypes = [ctypes.POINTER(LaunchConfig), vp, vp, vp]
        lib.cuLaunchKernelEx.restype = ctypes.c_int
        lib.cuTensorMapReplaceAddress.argtypes = [vp, vp]
        lib.cuTensorMapReplaceAddress.restype = ctypes.c_int
        _libcuda = {"cuLaunchKernel": lib.cuLaunchKernel, "cuLaunchKernelEx": lib.cuLaunchKernelEx,
                    "cuTensorMapReplaceAddress": lib.cuTensorMapReplaceAddress}
    return _libcuda


def pdl_launch_config(grid: int, threads: int, smem_bytes: int) -> LaunchConfig:
    """A launch configuration with programmatic stream serialization on (its stream set per launch)."""
    attr = LaunchAttribute(id=ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION, value=1)
    config = LaunchConfig(grid=(ctypes.c_uint * 3)(grid, 1, 1), block=(ctypes.c_uint * 3)(threads, 1, 1),
                          shared_mem_bytes=smem_bytes, stream=None, num_attrs=1)
    config._attr = attr  # keep the attribute alive with the configuration
    config.attrs = ctypes.pointer(attr)
    return config


def launch_checked(launch, stream_ptr: int, device: int, label: str) -> None:
    """launch(stream_ptr, pdl) -> error code, with the PDL setting of set_pdl; once more after making `device`'s
    context current if the calling thread had none (CuPy made none current there); raise CudaError on failure,
    naming `label` (the kernel and its configuration)."""
    pdl = get_pdl()
    err = launch(stream_ptr, pdl)
    if err == ERROR_INVALID_CONTEXT:
        ensure_context(device, force=True)
        err = launch(stream_ptr, pdl)
    if err:
        raise_driver_error(f"{'cuLaunchKernelEx' if pdl else 'cuLaunchKernel'}({label})", err)


def raise_driver_error(name: str, err: int) -> None:
    """Raise CudaError for the error code ``err`` that the driver call ``name`` returned."""
    code = cu.CUresult(err)
    _, msg = cu.cuGetErrorString(code)
    raise CudaError(f"{name} failed: {code.name}: {msg.decode() if msg else ''}")


# ----------------------------------------------------------------------------- tensor maps
TMA_DTYPE = cu.CUtensorMapDataType
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


def encode_nd(dtype, ptr: int, dims: tuple, strides_bytes: tuple, box: tuple, swizzle: int) -> cu.CUtensorMap:
    """A 3- to 5-D tiled tensor map: `dims` (innermost first), the byte strides of the outer ones (any order), `box`
    per dim."""
    u64, u32 = cu.cuuint64_t, cu.cuuint32_t
    return _check(cu.cuTensorMapEncodeTiled(
        dtype, len(dims), ptr, [u64(d) for d in dims], [u64(s) for s in strides_bytes], [u32(b) for b in box],
        [u32(1)] * len(dims), cu.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE, _SWIZZLE[swizzle],
        cu.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
        cu.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
        f"cuTensorMapEncodeTiled(dims={tuple(dims)}, strides={tuple(strides_bytes)}, box={tuple(box)})")
