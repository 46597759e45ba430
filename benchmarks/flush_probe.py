"""How much of a decode GEMM's time is the write-back of the L2 lines that the benchmark's flush leaves dirty?

    python -m benchmarks.flush_probe [--reps 30] [--out FILE]

The protocol flushes L2 with a 1 GiB memset before each timed call (protocol.py), which leaves the L2 full
of dirty lines: a GEMM that then reads its weights also pays their write-back. Here each decode shape is timed
(CUDA events around the call alone, median) after that flush, and after the same memset followed by a read
of another 1 GiB buffer (protocol.CleanFlushDevice), which writes the dirty lines back and leaves the L2 full of
clean ones;
interleaved call by call. A device-to-device copy of 64 MiB is timed the same two ways."""
from __future__ import annotations

import argparse
import statistics

SHAPES = ((1, 2112, 7168), (64, 2112, 7168), (1, 7168, 2048), (1, 4096, 7168), (1, 24576, 1536), (1, 7168, 16384),
          (1, 256, 7168), (16, 1024, 7168))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    import cupy

    import cugemm8

    from .protocol import CleanFlushDevice, CudaDevice
    from .tune import dense_inputs, gpu_props, provenance, write

    stream = cupy.cuda.Stream(non_blocking=True)
    devices = {False: CudaDevice(stream), True: CleanFlushDevice(stream)}   # the protocol's flush; and then a read

    def timed(call, clean: bool) -> float:
        dev = devices[clean]
        start, end = dev.event(), dev.event()
        dev.flush()
        dev.record(start)
        with stream:
            call()
        dev.record(end)
        dev.sync()
        return dev.elapsed_s(start, end)

    src, dst = cupy.ones(1 << 26, dtype=cupy.uint8), cupy.empty(1 << 26, dtype=cupy.uint8)
    cases = {"copy 64 MiB": lambda: dst.__setitem__(slice(None), src)}
    for m, n, k in SHAPES:
        a, sa, b, sb = dense_inputs(m, n, k)
        out = cupy.empty((m, n), dtype=cugemm8.api.BF16)
        cases[f"{m}x{n}x{k}"] = (lambda a=a, sa=sa, b=b, sb=sb, out=out:
                                 cugemm8.matmul(a, sa, b, sb, out=out, stream=stream))
    rows = []
    for name, call in cases.items():
        for clean in (False, True):
            timed(call, clean)
        t = {False: [], True: []}
        for _ in range(args.reps):
            for clean in (False, True):
                t[clean].append(timed(call, clean))
        dirty_us, clean_us = statistics.median(t[False]) * 1e6, statistics.median(t[True]) * 1e6
        rows.append({"case": name, "dirty_us": dirty_us, "clean_us": clean_us})
        print(f"{name:16s} after the memset {dirty_us:7.2f} us, after memset + read {clean_us:7.2f} us, "
              f"ratio {clean_us / dirty_us:.3f}", flush=True)
    write(args.out, {"gpu": gpu_props(), "info": {**provenance(), "reps": args.reps}, "rows": rows})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
