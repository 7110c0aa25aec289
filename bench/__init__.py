"""Benchmarks of tuner on studies with known truth and on real or simulated clusters.

Modules run from the repository root, e.g. ``python -m bench.stats_families``; tests import
them as ``bench.<module>``. Every import of tuner's internals by the statistics benches goes
through :mod:`bench.tuner_api`.
"""
