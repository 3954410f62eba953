"""The command line, the demo, reference models and reports about coverage and executed graphs."""
