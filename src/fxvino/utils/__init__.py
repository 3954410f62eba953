"""Helpers with no knowledge of the pipeline: FX edits, dtypes, the C library."""
