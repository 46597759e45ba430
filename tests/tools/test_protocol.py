"""CPU tier for benchmarks/protocol.py, the one timing protocol: a fake device whose clock only the
timed callables advance stands in for the GPU."""
import pytest

from benchmarks import protocol


class FakeDevice:
    """Events read a clock that the callables advance; flushes, records and syncs are logged."""

    def __init__(self):
        self.now = 0.0
        self.log = []

    def flush(self):
        self.log.append("flush")

    def event(self):
        return {}

    def record(self, event):
        event["t"] = self.now
        self.log.append("record")

    def sync(self):
        self.log.append("sync")

    def elapsed_s(self, start, end):
        return end["t"] - start["t"]


def timer(dev, **kw):
    sleeps = []
    t = protocol.Timer(dev, sleep=sleeps.append, **kw)
    return t, sleeps


def calls(dev, name, seconds, seen):
    def fn():
        seen.append(name)
        dev.now += seconds
    return fn


def test_interleaved_alternates_and_flushes_before_every_timed_call():
    dev = FakeDevice()
    t, sleeps = timer(dev, warmup=2)
    seen = []
    times = t.interleaved({"a": calls(dev, "a", 1.0, seen), "b": calls(dev, "b", 3.0, seen)}, reps=3)
    assert times == {"a": [1.0] * 3, "b": [3.0] * 3}
    assert sleeps == [protocol.SETTLE_S] and dev.log[0] == "sync"       # from an idle GPU
    assert seen == ["a", "a", "b", "b"] + ["a", "b"] * 3                  # warm-up, then call by call
    timed = dev.log[1:]
    assert timed[:3] == ["flush", "record", "record"] and timed.count("flush") == 6 and timed.count("sync") == 3


def test_interleaved_rotates_the_order():
    dev = FakeDevice()
    t, _ = timer(dev, warmup=0, settle_s=0)
    seen = []
    t.interleaved({n: calls(dev, n, 1.0, seen) for n in "abc"}, reps=3, rotate=True)
    assert "".join(seen) == "abc" + "bca" + "cab"


def test_alone_two_blocks_forward_then_reverse_each_settled():
    dev = FakeDevice()
    t, sleeps = timer(dev, warmup=1)
    seen = []
    times = t.alone({"a": calls(dev, "a", 1.0, seen), "b": calls(dev, "b", 2.0, seen)}, reps=2)
    assert seen == ["a"] * 3 + ["b"] * 3 + ["b"] * 3 + ["a"] * 3
    assert times == {"a": [1.0] * 4, "b": [2.0] * 4} and len(sleeps) == 4


def test_median_and_one():
    dev = FakeDevice()
    t, _ = timer(dev, warmup=0, settle_s=0)
    costs = iter([5.0, 1.0, 3.0, 7.0])

    def fn():
        dev.now += next(costs)

    assert t.median(fn, 3) == 3.0
    assert t.one(fn) == 7.0 and dev.log[-1] == "sync"


def test_paired_statistics():
    s = protocol.paired({"base": [1.0, 1.0, 1.0, 1.0], "fast": [0.9, 0.8, 0.9, 0.95], "aa": [1.0, 1.1, 0.9, 1.0]},
                        "base")
    assert s["base"]["median"] == 1.0 and "ratio" not in s["base"]
    assert s["fast"]["ratio"] == pytest.approx(0.9) and s["fast"]["verdict"] == "faster"
    assert s["fast"]["faster_reps"] == 1.0
    assert s["aa"]["verdict"] == "same"
    assert protocol.quartiles([2.0]) == (2.0, 2.0, 2.0)


def test_sustained_queues_flushed_calls_and_syncs_once():
    dev = FakeDevice()
    t, sleeps = timer(dev)
    seen = []
    assert t.sustained(calls(dev, "a", 2.0, seen), 4) == [2.0] * 4
    assert sleeps == [] and seen == ["a"] * 4                              # no settling, no warm-up
    assert dev.log == ["flush", "record", "record"] * 4 + ["sync"]
