"""The server's well-known port, in a module of its own so ``harmony server --help`` can print it
without loading the server (aiohttp, SQLAlchemy)."""

DEFAULT_PORT = 1979
