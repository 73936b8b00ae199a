"""Benchmarks of mf_memopt against MindFormers' own implementation (run with `python benchmarks/run.py`)."""
