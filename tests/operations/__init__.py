"""Tests of mergegate.operations."""
