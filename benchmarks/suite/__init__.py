"""The benchmark suite behind benchmarks/run.py: a small harness, the shared set-up, one module per section."""
