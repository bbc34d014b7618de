"""Helpers for tests and benchmarks that need real infrastructure rather than mocks."""
