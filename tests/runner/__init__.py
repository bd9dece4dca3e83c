"""Tests of mergegate.runner."""
