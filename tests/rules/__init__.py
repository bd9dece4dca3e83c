"""Tests of mergegate.rules."""
