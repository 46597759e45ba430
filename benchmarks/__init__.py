"""cugemm8's benchmark and tuning tools (not part of the installed package): `python -m benchmarks`
for the tables; tune, ffma_ab, trace, round_robin and sanitize as `python -m benchmarks.<tool>`.
Protocol: docs/benchmarking.md."""
