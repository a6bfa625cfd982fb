"""Benchmarks that print figures (issue 9); each module runs alone: `python bench/<name>.py`."""
