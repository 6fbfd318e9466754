"""Checkers of the tutorials' exercises (one module per lesson), importable by lessons and benchmarks."""
