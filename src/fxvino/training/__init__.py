"""The training path (aot_autograd=True): what it asks of AOTAutograd and of the backward's graphs."""
