"""Applications built on fxvino (optional extras): ``python -m fxvino.apps.txt2img``."""
