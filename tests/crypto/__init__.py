"""Tests of mergegate.crypto."""
