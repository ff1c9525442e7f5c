"""Prior data as files: write or read any format by name, by extension, or detected from the
content."""

from __future__ import annotations

import logging
from pathlib import Path

from harmony_base.errors import ConfigError
from harmony_core.priordata.csv_table import CSV_FIXED_COLUMNS, from_csv, to_csv
from harmony_core.priordata.model import PriorSession
from harmony_core.priordata.text_log import from_text, to_text
from harmony_core.priordata.xml_document import from_xml, to_xml

logger = logging.getLogger(__name__)

#: format name -> file extension
FORMATS = {"xml": ".xml", "csv": ".csv", "text": ".log"}


def dumps(prior: PriorSession, fmt: str) -> str:
    """``prior`` in format ``fmt`` (``xml``, ``csv`` or ``text``)."""
    writers = {"xml": to_xml, "csv": to_csv, "text": to_text}
    if fmt not in writers:
        raise ConfigError(f"export format must be one of {sorted(writers)}, got {fmt!r}")
    return writers[fmt](prior)


def loads(text: str, fmt: str | None = None, *, source: str = "prior data") -> PriorSession:
    """Parse prior data; ``fmt`` None detects it from the content."""
    fmt = fmt or detect_format(text, source=source)
    readers = {"xml": from_xml, "csv": from_csv, "text": from_text}
    if fmt not in readers:
        raise ConfigError(f"import format must be one of {sorted(readers)}, got {fmt!r}")
    return readers[fmt](text, source=source)


def detect_format(text: str, *, source: str = "prior data") -> str:
    """``xml``, ``csv`` or ``text``, from the first lines of ``text``."""
    head = text.lstrip()[:4096]
    if head.startswith("<"):
        return "xml"
    if head.startswith("# harmony prior data"):
        for line in head.splitlines():
            if not line.startswith("#"):
                return "csv" if line.startswith(CSV_FIXED_COLUMNS[0] + ",") else "text"
        return "text"
    raise ConfigError(f"{source}: not harmony prior data (expected an XML document or a file "
                      f"starting with '# harmony prior data')")


def dump(prior: PriorSession, path: str | Path, fmt: str | None = None) -> Path:
    """Write ``prior`` to ``path``; the format comes from the extension when ``fmt`` is None."""
    p = Path(path)
    fmt = fmt or format_for_path(p)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(dumps(prior, fmt), encoding="utf-8")
    logger.info("wrote %d trials of session %s to %s (%s)", len(prior.trials), prior.name, p, fmt)
    return p


def load(path: str | Path, fmt: str | None = None) -> PriorSession:
    """Read prior data from ``path`` (format from ``fmt``, else detected from the content)."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read prior data {p}: {exc}") from None
    return loads(text, fmt, source=str(p))


def format_for_path(path: Path) -> str:
    """The format named by a file's extension (``.xml``, ``.csv``, ``.log``/``.txt``)."""
    suffix = path.suffix.lower()
    for fmt, ext in FORMATS.items():
        if suffix == ext:
            return fmt
    if suffix == ".txt":
        return "text"
    raise ConfigError(f"{path}: cannot tell the format from the extension {suffix!r}; use "
                      f".xml, .csv or .log (or pass the format)")
