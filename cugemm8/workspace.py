"""Scratch memory that a kernel's CTAs share in global memory: a workspace group's counts, epochs and tagged FP32
parts (e4m3 output of narrow decode tiles, ``cuda_src/gemm/group_workspace.cuh``).

One launch at a time may use a workspace, so there is one per device and stream, grown as calls need. A new one is
allocated and zeroed at once, outside any stream's order (a private stream, waited for), with the calling thread's
CUDA-graph capture mode relaxed for those few calls: created while its stream captures a graph, it is still ready
before the graph runs, and the capture stays valid. Each launch leaves the counts zero and moves the epochs on. A
captured graph holds the address of its stream's workspace, so none is ever freed (growth doubles, so the outgrown
ones add up to at most the current one); such a graph must not be replayed while calls run on the stream it was
captured on, as with any library's workspace.
"""
from __future__ import annotations

import threading

import cupy
from cuda.bindings import driver

from .heuristics import KernelConfig, ceil_div

_COUNTER_ALIGN = 256
_SLOT_WORDS_BYTES = 8        # a u32 count of arrivals and a u32 epoch per slot
_TAGGED_VALUE_BYTES = 8      # an FP32 value beside its tag
_MIN_BYTES = 1 << 20

_workspaces: dict[tuple[int, int], cupy.ndarray] = {}
_outgrown: list[cupy.ndarray] = []   # kept: a captured graph may still use them
_lock = threading.Lock()


def workspace_bytes(cfg: KernelConfig, m: int) -> int:
    """Bytes the kernel of `cfg` needs for M rows (group_workspace.cuh lays them out): a count and an epoch per
    m-block and 128-column group (rounded up to 256 bytes), then each group's parts, one per column chunk of
    block_m rows of tagged FP32 sums. 0 for configurations without a workspace group."""
    if cfg.workspace_group == 1 or m == 0:
        return 0
    slots = ceil_div(m, cfg.block_m) * ceil_div(cfg.n, 128)
    counters = ceil_div(slots * _SLOT_WORDS_BYTES, _COUNTER_ALIGN) * _COUNTER_ALIGN
    part = cfg.block_m * (cfg.block_n // cfg.split_k) * _TAGGED_VALUE_BYTES
    return counters + slots * cfg.workspace_group * cfg.split_k * part


def get(device: int, stream_ptr: int, nbytes: int) -> int:
    """The address of at least `nbytes` of this device's workspace for `stream_ptr` (0 if nbytes is 0)."""
    if nbytes == 0:
        return 0
    key = (device, stream_ptr)
    buf = _workspaces.get(key)
    if buf is None or buf.nbytes < nbytes:
        with _lock:
            buf = _workspaces.get(key)
            if buf is None or buf.nbytes < nbytes:
                size = max(nbytes, _MIN_BYTES, 2 * buf.nbytes if buf is not None else 0)
                new = _zeroed(device, size)
                if buf is not None:
                    _outgrown.append(buf)
                _workspaces[key] = buf = new
    return buf.data.ptr


def _zeroed(device: int, nbytes: int) -> cupy.ndarray:
    """`nbytes` of zeros on `device`, ready when this returns, whatever stream may be capturing a graph."""
    err, mode = driver.cuThreadExchangeStreamCaptureMode(driver.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_RELAXED)
    if err != driver.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"cuThreadExchangeStreamCaptureMode failed: {err}")
    try:
        with cupy.cuda.Device(device):
            buf = cupy.empty(nbytes, dtype=cupy.uint8)
            stream = cupy.cuda.Stream(non_blocking=True)
            cupy.cuda.runtime.memsetAsync(buf.data.ptr, 0, nbytes, stream.ptr)
            stream.synchronize()
    finally:
        driver.cuThreadExchangeStreamCaptureMode(mode)
    return buf
