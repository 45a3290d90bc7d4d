"""One module per section of benchmarks/run.py (1 constraint ... 7 flops)."""
