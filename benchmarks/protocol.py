"""The timing protocol, the one implementation every tool uses.

Each timed call: a 1 GiB memset (flushes the 50-60 MB L2 and hides the host's launch cost behind GPU
work), a CUDA event, the call, a CUDA event; the statistic is the median. Two arrangements:

* interleaved: the implementations alternate call by call (optionally rotating the order every
  repetition), so clock drift under the power cap hits them alike;
* alone: each implementation by itself, in two blocks (forward order, then reverse), each block from an
  idle GPU: how DeepGEMM's grouped numbers were measured. Alternating two or three heavy kernels reaches
  the power cap's lower clock step sooner than one kernel does.

Blocks start from an idle GPU (SETTLE_S of sleep): sustained load lowers the clock a further step, so
without the pause a shape's numbers depend on what ran before it.
"""
from __future__ import annotations

import statistics
import time
from typing import Callable

FLUSH_BYTES = 1 << 30
WARMUP_CALLS = 3
SETTLE_S = 1.0


class CudaDevice:
    """The protocol's GPU side on one CuPy stream: the flush buffer, events, synchronization."""

    def __init__(self, stream=None, flush_bytes: int = FLUSH_BYTES):
        import cupy as cp

        self.cp = cp
        self.stream = stream if stream is not None else cp.cuda.get_current_stream()
        self.flush_bytes = flush_bytes
        with self.stream:
            self.flush_buf = cp.empty(flush_bytes, dtype=cp.uint8)

    def flush(self) -> None:
        self.flush_buf.data.memset_async(0, self.flush_bytes, stream=self.stream)

    def event(self):
        return self.cp.cuda.Event()

    def record(self, event) -> None:
        event.record(self.stream)

    def sync(self) -> None:
        self.stream.synchronize()

    def elapsed_s(self, start, end) -> float:
        return self.cp.cuda.get_elapsed_time(start, end) * 1e-3


class CleanFlushDevice(CudaDevice):
    """The protocol's memset, then a read of another 1 GiB (a sum): the L2 ends full of clean lines rather than the
    memset's dirty ones, which a kernel run after the plain flush also writes back (NOTES.md v18, v29). For
    diagnosis only: the tables use the plain flush."""

    def __init__(self, stream=None, flush_bytes: int = FLUSH_BYTES):
        super().__init__(stream, flush_bytes)
        cp = self.cp
        with self.stream:
            self.clean_buf = cp.ones(flush_bytes // 4, dtype=cp.float32)
            self.sink = cp.empty((), dtype=cp.float32)

    def flush(self) -> None:
        super().flush()
        with self.stream:
            self.cp.sum(self.clean_buf, out=self.sink)


class Timer:
    """Times callables by the protocol; every method returns seconds per call."""

    def __init__(self, device=None, *, settle_s: float = SETTLE_S, warmup: int = WARMUP_CALLS,
                 sleep: Callable[[float], None] = time.sleep):
        self.device = device if device is not None else CudaDevice()
        self.settle_s, self.warmup, self.sleep = settle_s, warmup, sleep

    def flush(self) -> None:
        self.device.flush()

    def settle(self) -> None:
        self.device.sync()
        if self.settle_s > 0:
            self.sleep(self.settle_s)

    def interleaved(self, fns: dict, reps: int, *, rotate: bool = False) -> dict[str, list[float]]:
        """`reps` samples of every callable, alternating call by call (the order rotating by one each
        repetition if `rotate`), after settling and `warmup` untimed calls of each."""
        dev = self.device
        names = list(fns)
        self.settle()
        for fn in fns.values():
            for _ in range(self.warmup):
                fn()
        events = {name: (dev.event(), dev.event()) for name in names}
        times = {name: [] for name in names}
        for r in range(reps):
            order = names[r % len(names):] + names[:r % len(names)] if rotate and names else names
            for name in order:
                start, end = events[name]
                dev.flush()
                dev.record(start)
                fns[name]()
                dev.record(end)
            dev.sync()
            for name in names:
                times[name].append(dev.elapsed_s(*events[name]))
        return times

    def alone(self, fns: dict, reps: int) -> dict[str, list[float]]:
        """Each callable timed with nothing else running: two blocks of `reps` each, in forward then
        reverse order, every block after settling (2 * reps samples each)."""
        times = {name: [] for name in fns}
        for name in list(fns) + list(reversed(fns)):
            times[name] += self.interleaved({name: fns[name]}, reps)[name]
        return times

    def samples(self, fn, reps: int) -> list[float]:
        """`reps` samples of one callable (interleaved with itself alone)."""
        return self.interleaved({"fn": fn}, reps)["fn"]

    def median(self, fn, reps: int) -> float:
        return statistics.median(self.samples(fn, reps))

    def sustained(self, fn, calls: int) -> list[float]:
        """`calls` flushed, event-timed calls queued back to back with one synchronization at the end:
        the GPU under sustained load (no settling, no warm-up), as the power cap sees it."""
        dev = self.device
        events = [(dev.event(), dev.event()) for _ in range(calls)]
        for start, end in events:
            dev.flush()
            dev.record(start)
            fn()
            dev.record(end)
        dev.sync()
        return [dev.elapsed_s(start, end) for start, end in events]

    def one(self, fn) -> float:
        """One flushed, event-timed call, without settling or warm-up (e.g. a traced call)."""
        dev = self.device
        start, end = dev.event(), dev.event()
        dev.flush()
        dev.record(start)
        fn()
        dev.record(end)
        dev.sync()
        return dev.elapsed_s(start, end)


def quartiles(xs) -> tuple[float, float, float]:
    if len(xs) == 1:
        return xs[0], xs[0], xs[0]
    q1, q2, q3 = statistics.quantiles(xs, n=4, method="inclusive")
    return q1, q2, q3


def paired(samples: dict, base: str) -> dict:
    """Per series: median and quartiles; against `base`: the ratio of medians and the quartiles of the
    per-repetition paired ratios, with a verdict when the paired interquartile range excludes 1."""
    out = {}
    for name, xs in samples.items():
        q1, med, q3 = quartiles(xs)
        row = {"median": med, "q1": q1, "q3": q3, "iqr": q3 - q1, "min": min(xs), "max": max(xs)}
        if name != base:
            pr = [x / y for x, y in zip(xs, samples[base])]
            p1, pm, p3 = quartiles(pr)
            row.update(ratio=med / statistics.median(samples[base]), paired_median=pm, paired_q1=p1, paired_q3=p3,
                       faster_reps=sum(p < 1 for p in pr) / len(pr),
                       verdict="faster" if p3 < 1 else "slower" if p1 > 1 else "same")
        out[name] = row
    return out
