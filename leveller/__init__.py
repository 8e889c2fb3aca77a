"""LEVELLER: fair communication scheduling for multi-tenant training clusters."""

__version__ = "0.1.0"
