"""Reliability torture tests: crash, I/O faults, contention, corruption corpus,
bad input and file security. The long runs are module runners
(``python -m tests.reliability.crash`` and friends); CI runs short seeded
versions of the same code."""
