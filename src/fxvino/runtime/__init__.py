"""Running compiled partitions from PyTorch, and the memory and weight checks around the calls."""
