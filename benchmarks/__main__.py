"""Run every benchmark: ``python -m benchmarks [--quick] [--only a,b] [--skip a,b]``.

Each benchmark runs as its own process (``python -m benchmarks.<module> [--quick]``) so that
one failing or leaking does not take the others down; the exit code is non-zero if any failed.
Results land in ``benchmarks/results/`` (see ``benchmarks/README.md``).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time

#: module (under ``benchmarks``) and the arguments it takes besides ``--quick``
BENCHMARKS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("strategies_table", ()),
    ("isl_constraint", ()),
    ("server_roundtrip", ()),
    ("bme_speed", ()),
    ("bme_prior", ()),
    ("anytime_race", ()),
    ("tpch_load", ()),
    ("cli_startup", ()),
    ("evidence", ("optimizers",)),
    ("evidence", ("overheads",)),
    ("evidence", ("tight",)),
    ("evidence", ("shift",)),
    ("evidence", ("endtoend",)),
    ("evidence", ("sensitivity",)),
    ("evidence", ("estimators",)),
    ("evidence", ("optimizers_pg",)),
)


def _label(module: str, args: tuple[str, ...]) -> str:
    return args[0] if module == "evidence" else module


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="each benchmark's quick mode")
    parser.add_argument("--only", default="", help="comma-separated names to run")
    parser.add_argument("--skip", default="", help="comma-separated names to skip")
    args = parser.parse_args(argv)
    only = {n for n in args.only.split(",") if n}
    skip = {n for n in args.skip.split(",") if n}
    failed: list[str] = []
    for module, extra in BENCHMARKS:
        label = _label(module, extra)
        if (only and label not in only) or label in skip:
            continue
        cmd = [sys.executable, "-m", f"benchmarks.{module}", *extra]
        if args.quick:
            cmd.append("--quick")
        started = time.monotonic()
        print(f"== {label}: {' '.join(cmd[1:])}", flush=True)
        rc = subprocess.call(cmd)
        print(f"== {label}: exit {rc} after {time.monotonic() - started:.0f} s", flush=True)
        if rc != 0:
            failed.append(label)
    if failed:
        print(f"failed: {', '.join(failed)}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
