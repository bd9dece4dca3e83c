"""Tests of mergegate.audit."""
