"""Flow-level fluid simulator of a whole network (`leveller simulate network`)."""
