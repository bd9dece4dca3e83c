"""Tests of mergegate.github."""
