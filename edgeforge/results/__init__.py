"""Bench results: the versioned schema, statistics over raw samples, atomic storage."""
