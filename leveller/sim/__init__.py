"""Simulators that call leveller.core exactly as the live controller does."""
