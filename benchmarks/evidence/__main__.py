"""Command line: ``python -m benchmarks.evidence <name> [options]`` (``--help`` per benchmark)."""

from __future__ import annotations

import importlib
import logging
import signal
import sys

NAMES = ("optimizers", "optimizers_pg", "endtoend", "sensitivity", "estimators", "shift",
         "tight", "overheads", "procmem", "aa", "paired", "power", "loaded",
         "headroom", "live", "oomgrid", "restart", "probed", "pertx", "proposals", "switchback",
         "probecost")


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in (*NAMES, "all"):
        print(f"usage: python -m benchmarks.evidence {{{','.join(NAMES)},all}} [--quick] ...")
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    # SIGTERM unwinds like Ctrl-C, so the benchmarks' finally blocks put the configuration back
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    names = NAMES if argv[0] == "all" else (argv[0],)
    rc = 0
    for name in names:
        module = importlib.import_module(f"benchmarks.evidence.{name}")
        rc |= module.main(argv[1:])
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
