"""Running the ``tpchgen-cli`` TPC-H data generator (PyPI package ``tpchgen-cli``) offline."""

from __future__ import annotations

import logging
import shutil
import subprocess
import sys
from pathlib import Path

from harmony_base.errors import WorkloadError

logger = logging.getLogger(__name__)

GENERATOR = "tpchgen-cli"


def find_generator() -> str:
    """Path of the ``tpchgen-cli`` binary: next to this Python first, then on PATH."""
    beside = Path(sys.executable).parent / GENERATOR
    if beside.exists():
        return str(beside)
    found = shutil.which(GENERATOR)
    if found:
        return found
    raise WorkloadError(
        f"the TPC-H data generator {GENERATOR!r} was not found next to {sys.executable} "
        "or on PATH; install it with `pip install tpchgen-cli`"
    )


def scale_arg(scale: float) -> str:
    """The scale factor as the generator's command line wants it (``0.01``, ``1``)."""
    return format(scale, "g")


def generate_files(tables: tuple[str, ...], scale: float, directory: Path) -> dict[str, Path]:
    """Write each table as ``<directory>/<table>.csv`` (header first) in one generator run.

    Files a finished run left are reused; a stamp file marks a complete set, so an
    interrupted generation is redone. One run for all tables because every start of the
    generator costs about 1.4 s (it builds its text pool first).
    """
    directory.mkdir(parents=True, exist_ok=True)
    stamp = directory / f".complete-sf{scale_arg(scale)}"
    paths = {table: directory / f"{table}.csv" for table in tables}
    if stamp.exists() and all(p.exists() for p in paths.values()):
        logger.info("reusing generated TPC-H files in %s", directory)
        return paths
    stamp.unlink(missing_ok=True)
    cmd = [
        find_generator(), "csv", "-s", scale_arg(scale), "-T", ",".join(tables),
        "-q", "--no-progress", "--overwrite", "-o", str(directory),
    ]  # fmt: skip
    logger.debug("running %s", cmd)
    done = subprocess.run(cmd, capture_output=True, check=False)
    if done.returncode != 0:
        raise WorkloadError(
            f"{GENERATOR} failed generating TPC-H scale {scale_arg(scale)} into {directory} "
            f"(exit {done.returncode}): {done.stderr.decode(errors='replace').strip()}"
        )
    missing = [str(p) for p in paths.values() if not p.exists()]
    if missing:
        raise WorkloadError(f"{GENERATOR} finished but did not write {missing}")
    stamp.touch()
    return paths
