"""Harmony for PostgreSQL: shared core (errors, session core, definitions, CLI)."""

__version__ = "0.1.0"
