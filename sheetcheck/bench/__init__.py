"""Benchmarks: each module has run(args) and reports ratios measured in one run."""
