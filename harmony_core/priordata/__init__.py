"""Prior data: a finished session's trials and metadata, in three text formats, read back exactly.

A :class:`PriorSession` is what is worth keeping from a run: the definition (parameters,
ranges, strategy, objective), the hosts its clients ran on, when it started, and every
trial (point, performance or failure, times, client). It is written as a text log, as one
XML document, or as CSV, and each reader rebuilds an equal object (floats are written with
``repr``, so nothing is lost); :func:`to_dict` / :func:`from_dict` are the JSON form the
server's ``GET /priors/{name}`` answers. A core's trials become prior data with
:func:`prior_from_core`; a running server's are read over HTTP by
:mod:`tuner_client.api.priordata_remote` (the store side in
:mod:`harmony_server.priordata_store`); how a new session starts from them in
:mod:`harmony_core.warmstart`.

One module per job: :mod:`.model` (the session and its JSON form), :mod:`.text_log`,
:mod:`.xml_document`, :mod:`.csv_table`, :mod:`.files` (a format by name, extension or content),
and :mod:`.fields` (what the formats share); this package re-exports the public names.
"""

from __future__ import annotations

from harmony_base.hostinfo import HostInfo
from harmony_base.trial import TrialRecord
from harmony_core.priordata.csv_table import from_csv, to_csv
from harmony_core.priordata.fields import FORMAT_VERSION
from harmony_core.priordata.files import (
    FORMATS,
    detect_format,
    dump,
    dumps,
    format_for_path,
    load,
    loads,
)
from harmony_core.priordata.model import PriorSession, from_dict, prior_from_core, to_dict
from harmony_core.priordata.text_log import from_text, to_text
from harmony_core.priordata.xml_document import from_xml, to_xml

__all__ = ["FORMATS", "FORMAT_VERSION", "HostInfo", "PriorSession", "TrialRecord",
           "detect_format", "dump", "dumps", "format_for_path", "from_csv", "from_dict",
           "from_text", "from_xml", "load", "loads", "prior_from_core", "to_csv", "to_dict",
           "to_text", "to_xml"]
