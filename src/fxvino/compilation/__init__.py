"""Compiling one lowered partition for its device: plugin properties, graphs compiled together over shared weights."""
