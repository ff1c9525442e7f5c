"""Warm start for the tuner: read the prior sessions a config's ``warm_start`` names.

``warm_start: {from: [FILE or DIRECTORY, ...], server: URL}`` — exported prior data files
(XML, CSV or text log; a directory contributes every such file in it) and/or every session
of a running Harmony server (read over HTTP; the client never opens the server's store).
The flows then hand them to :func:`harmony_core.warmstart.apply_warm_start` before each session
is created; which priors fit a session is decided there (same
parameters and objective, same workload, similar host).
"""

from __future__ import annotations

import logging
from pathlib import Path

from harmony_base.errors import ConfigError, HarmonyError
from harmony_core.priordata import FORMATS, PriorSession, load
from tuner_client.api.priordata_remote import priors_from_server
from tuner_client.config import WarmStartConfig

__all__ = ["load_priors"]

logger = logging.getLogger(__name__)

#: file name endings read from a directory named in ``warm_start.from``
PRIOR_SUFFIXES = (*FORMATS.values(), ".txt")


#: URL schemes of a server's store (``harmony server --store``), which the tuner never opens
STORE_SCHEMES = ("sqlite", "postgresql", "postgres", "mysql")


def _files(source: str, where: str) -> list[Path]:
    scheme = source.split("://", 1)[0].split("+", 1)[0].lower() if "://" in source else ""
    if scheme in STORE_SCHEMES or scheme in ("http", "https"):
        what = "a server's URL" if scheme in ("http", "https") else "a server's store URL"
        raise ConfigError(
            f"{where}: {source!r} is {what}, but warm_start.from takes exported files; the "
            f"tuner reads prior data from files or over a server's HTTP API, never from its "
            f"store. Name the running server in warm_start.server (http://HOST:PORT: every "
            f"session of its store, imported ones too), or export the sessions first with "
            f"`harmony export SESSION --store URL --out DIR/SESSION.xml` and list DIR here")
    path = Path(source).expanduser()
    if path.is_dir():
        found = sorted(p for p in path.iterdir()
                       if p.is_file() and p.suffix.lower() in PRIOR_SUFFIXES)
        if not found:
            logger.warning("%s: directory %s holds no prior data file (%s)", where, path,
                           ", ".join(PRIOR_SUFFIXES))
        return found
    if not path.is_file():
        raise ConfigError(f"{where}: prior data file {source!r} does not exist (give exported "
                          f"sessions: .xml, .csv, .log, or a directory of them)")
    return [path]


def load_priors(config: WarmStartConfig, *, source: str = "tuner config") -> list[PriorSession]:
    """Every prior session ``config`` names, files first, then the server's sessions."""
    priors: list[PriorSession] = []
    where = f"{source}: warm_start.from"
    for item in config.sources:
        for path in _files(item, where):
            try:
                priors.append(load(path))
            except HarmonyError as exc:
                raise ConfigError(f"{where}: cannot read prior data {path}: {exc}") from None
    if config.server is not None:
        try:
            priors.extend(priors_from_server(config.server))
        except HarmonyError as exc:
            raise ConfigError(f"{source}: warm_start.server: cannot read prior sessions from "
                              f"{config.server}: {exc}") from None
    logger.info("warm start: %d prior session(s) read (%s)", len(priors),
                ", ".join(p.name for p in priors[:10]) + (" ..." if len(priors) > 10 else ""))
    return priors
