"""Scratch memory in which a kernel's CTAs meet: a global group's arrivals, epoch and tagged row amax (e4m3 output
of narrow decode tiles, ``cuda_src/gemm/group_meet.cuh``).

One launch at a time may use a workspace, so there is one per device and stream, grown as calls need. A new one is
allocated and zeroed at once, outside any stream's order (a private stream, waited for), with the calling thread's
CUDA-graph capture mode relaxed for those few calls: made while its stream captures a graph, it is still ready
before the graph runs, and the capture stays valid. Each launch leaves the arrivals at zero and moves the epoch on,
so launches of any configuration share it. A captured graph holds the address of its stream's workspace, so none is
ever freed (growth doubles, so the outgrown ones add up to at most the current one); such a graph must not be
replayed while other calls run on the stream it was captured on, as with any library's workspace.
"""
from __future__ import annotations

import threading

import cupy
from cuda.bindings import driver

from .heuristics import KernelConfig, ceil_div

HEADER_BYTES = 256          # a u32 count of arrivals and a u32 epoch (group_meet.cuh, kHeaderBytes)
_TAGGED_BYTES = 8           # an FP32 amax beside its tag
_MIN_BYTES = 1 << 20

_workspaces: dict[tuple[int, int], cupy.ndarray] = {}
_outgrown: list[cupy.ndarray] = []   # kept: a captured graph may still use them
_lock = threading.Lock()


def workspace_bytes(cfg: KernelConfig, m: int) -> int:
    """Bytes the kernel of `cfg` needs for M rows (group_meet.cuh lays them out): the header, then per m-block and
    128-column group a part of block_m tagged amax for each of the group's CTAs. 0 for configurations without a
    global group."""
    if cfg.global_group == 1 or m == 0:
        return 0
    slots = ceil_div(m, cfg.block_m) * ceil_div(cfg.n, 128)
    return HEADER_BYTES + slots * cfg.global_group * cfg.split_k * cfg.block_m * _TAGGED_BYTES


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
