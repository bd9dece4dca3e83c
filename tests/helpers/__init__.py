"""Builders for real repositories, keys and signed merges used across the tests."""
