"""(placeholder: lowerings of this family are being written)."""
