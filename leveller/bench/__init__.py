"""Measurement logic behind `leveller bench ...` (the commands only format and print)."""
