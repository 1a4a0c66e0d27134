"""Searches past what one process holds in memory: the compact breadth-first search (fingerprints
and flat arrays in memory, each level on disk)."""

from statechan.search.compact import Level, projected_total, search
from statechan.search.table import FingerprintTable, collision_probability, key64

__all__ = ["FingerprintTable", "Level", "collision_probability", "key64", "projected_total", "search"]
