"""One module per op family; importing them fills the lowering registry."""
