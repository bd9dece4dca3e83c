"""Tests of mergegate.git."""
