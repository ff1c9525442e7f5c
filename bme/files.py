"""Reading the BME CLI's inputs: (size, miss) CSV files and parameter JSON files, with
errors that name the file, row and column."""

from __future__ import annotations

import csv
import json
import math
import os
from pathlib import Path
from typing import Any

from bme.equation import BMEParams
from harmony_base.errors import ConfigError

REQUIRED_COLUMNS = ("size", "miss")


def read_curve_csv(path: str | os.PathLike[str]) -> tuple[list[float], list[float]]:
    """(sizes, misses) from a CSV whose header names the columns ``size`` and ``miss``.

    Sizes must be >= 0, misses in [0, 1], and at least 3 distinct sizes present.
    """
    name = os.fspath(path)
    try:
        with open(path, newline="", encoding="utf-8") as handle:
            rows = list(csv.reader(handle))
    except OSError as exc:
        raise ConfigError(f"cannot read {name}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{name} is not UTF-8 text: {exc}") from None
    numbered = [(i + 1, row) for i, row in enumerate(rows) if any(c.strip() for c in row)]
    if not numbered:
        raise ConfigError(f"{name} is empty; expected a header 'size,miss' and data rows")
    header_line, header = numbered[0]
    columns = [c.strip().lower() for c in header]
    if not all(col in columns for col in REQUIRED_COLUMNS):
        raise ConfigError(f"{name}, line {header_line}: the header must name the columns "
                          f"'size' and 'miss' (e.g. 'size,miss'), got {','.join(header)!r}")
    at = {col: columns.index(col) for col in REQUIRED_COLUMNS}
    sizes: list[float] = []
    misses: list[float] = []
    for line, row in numbered[1:]:
        values = {}
        for col, idx in at.items():
            if idx >= len(row):
                raise ConfigError(f"{name}, line {line}: missing column {col!r}")
            text = row[idx].strip()
            try:
                value = float(text)
            except ValueError:
                raise ConfigError(f"{name}, line {line}, column {col!r}: not a number: "
                                  f"{text!r}") from None
            if not math.isfinite(value):
                raise ConfigError(f"{name}, line {line}, column {col!r}: must be finite, "
                                  f"got {text!r}")
            values[col] = value
        if values["size"] < 0:
            raise ConfigError(f"{name}, line {line}, column 'size': sizes must be >= 0, "
                              f"got {values['size']:g}")
        if not 0 <= values["miss"] <= 1:
            raise ConfigError(f"{name}, line {line}, column 'miss': a miss probability must be "
                              f"in [0, 1], got {values['miss']:g}")
        sizes.append(values["size"])
        misses.append(values["miss"])
    if len(set(sizes)) < 3:
        raise ConfigError(f"{name}: the BME fit needs at least 3 points at distinct sizes, "
                          f"got {len(set(sizes))}")
    return sizes, misses


def _load_json(path: str | os.PathLike[str]) -> Any:
    name = os.fspath(path)
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"cannot read {name}: {exc.strerror}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{name} is not valid JSON: {exc}") from None


def read_params_json(path: str | os.PathLike[str]) -> BMEParams:
    """One parameter object {p_star, p_c, m_b, m_star} from a JSON file."""
    return BMEParams.from_dict(_load_json(path), source=os.fspath(path))


def read_params_list_json(path: str | os.PathLike[str]) -> list[BMEParams]:
    """A JSON list of parameter objects (one per pool)."""
    data = _load_json(path)
    name = os.fspath(path)
    if not isinstance(data, list) or not data:
        raise ConfigError(f"{name}: expected a non-empty JSON list of parameter objects")
    return [BMEParams.from_dict(item, source=f"{name}, item {i}") for i, item in enumerate(data)]
