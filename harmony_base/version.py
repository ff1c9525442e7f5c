"""The package's version, here at the bottom so that every layer may name it (the CLI's
``harmony.__version__`` is this one)."""

__version__ = "0.1.0"
