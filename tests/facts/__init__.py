"""Tests of mergegate.facts."""
