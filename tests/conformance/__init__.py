"""OpInfo-driven conformance suite for the fxvino backend (see README.md)."""
