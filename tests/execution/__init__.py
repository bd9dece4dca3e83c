"""Tests of mergegate.execution."""
