"""``python -m harmony_server [server options]``: run the session server."""

from harmony_server.cli import main

raise SystemExit(main())
