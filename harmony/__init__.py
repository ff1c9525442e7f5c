"""Harmony for PostgreSQL: the command line (``harmony``), the roof of the layers. The layers
below it are top-level packages: harmony_base, harmony_core, harmony_report, and the others
named in pyproject.toml's import-linter ``layers`` contract."""

from harmony_base.version import __version__

__all__ = ["__version__"]
