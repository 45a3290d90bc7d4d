"""The repository root (the benchmarks run the checkout they are in)."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
