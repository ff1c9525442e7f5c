"""The shape of a JSON value, for the annotations of code that builds JSON or passes it along.

:data:`JSON` is what :func:`json.dumps` writes: its containers are read-only (``Mapping``,
``Sequence``), so a ``dict[str, float]`` or a ``list[int]`` is a JSON value as it stands.
A document read from untrusted input is ``Any`` only at its parser (``json.loads`` and
``yaml.safe_load`` return ``Any``), which checks it and turns it into typed records.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TypeAlias

#: a JSON value: an object, an array, a string, a number, a boolean or null
JSON: TypeAlias = "Mapping[str, JSON] | Sequence[JSON] | str | int | float | bool | None"
#: a JSON object being built (a ``dict``, so that keys can be added)
JSONObject: TypeAlias = "dict[str, JSON]"
