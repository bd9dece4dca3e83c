"""The test suite: one folder per wing of src/mergegate (README.md here is the map)."""
