"""Test helpers shared by several test files: reference computations, tiny models and refits, tolerances,
and running the tiny workflow."""
