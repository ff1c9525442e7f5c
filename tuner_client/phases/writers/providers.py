"""The recommendation as the managed providers' command-line tools take it, each value in the
unit that interface expects: the knob's own ``pg_settings`` unit as a bare integer (work_mem
in kB, shared_buffers and effective_cache_size in 8 kB pages, times in the knob's ms/s/min).

What the formats rest on (read 2026-12 through the documentation search):

- AWS RDS ``aws rds modify-db-parameter-group``: ``--cli-input-json`` takes the API's request,
  ``DBParameterGroupName`` and ``Parameters``, a list of ``ParameterName``, ``ParameterValue``,
  ``ApplyMethod``; ``immediate`` is for dynamic parameters only, ``pending-reboot`` for either;
  at most 20 parameters per request (ModifyDBParameterGroup, AWS CLI and API reference,
  https://docs.aws.amazon.com/goto/cli2/rds-2014-10-31/ModifyDBParameterGroup). Values are in
  PostgreSQL's unit without a suffix: RDS sets shared_buffers to
  ``{DBInstanceClassMemory/32768}``, a quarter of the memory only when counted in 8 kB pages
  (https://docs.aws.amazon.com/AmazonRDS/latest/UserGuide/PostgreSQL.Tuning.concepts.memory.html).
  Booleans are written ``1``/``0``, the values RDS's parameter lists allow.
- Google Cloud SQL ``gcloud sql instances patch INSTANCE --database-flags=name=value,...``:
  the call replaces every flag the instance has, so flags already set must be listed again
  (Cloud SQL "Configure database flags", https://cloud.google.com/sql/docs/postgres/flags).
  Integer flags take PostgreSQL's unit without a suffix. (Not confirmed from the flags table's
  unit column, which the search did not return; the same native units as the other two.)
- Azure Flexible Server ``az postgres flexible-server parameter set --resource-group G
  --server-name S --name N --value V``, one parameter per call
  (https://learn.microsoft.com/cli/azure/postgres/flexible-server/parameter); the server
  parameter tables give memory parameters as integers of PostgreSQL's unit (e.g.
  logical_decoding_work_mem default 65536, i.e. 64 MB in kB; autovacuum_work_mem allowed
  -1-2097151; commit_timestamp_buffers "Unit is 8kb"),
  https://learn.microsoft.com/azure/postgresql/flexible-server/server-parameters-table-resource-usage---memory.
  Static parameters take effect after ``az postgres flexible-server restart``.
"""

from __future__ import annotations

import json
import shlex

from tuner_client.phases.writers.base import (
    MANAGED,
    Recommendation,
    RecommendationWriter,
    RecommendedKnob,
)

#: RDS takes at most this many parameters in one modify-db-parameter-group request
RDS_MAX_PARAMETERS = 20


def provider_value(knob: RecommendedKnob, *, booleans: tuple[str, str] = ("on", "off")) -> str:
    """``knob``'s value as a provider's parameter: the native-unit number, the boolean in the
    provider's spelling (``booleans``: true, false), or the text."""
    if knob.vartype == "bool":
        return booleans[0] if knob.native == "on" else booleans[1]
    return knob.native


class AwsRdsWriter(RecommendationWriter, kind="aws_rds"):
    """``aws rds modify-db-parameter-group --cli-input-json file://aws-rds-parameters.json``
    (the group's name is a placeholder to replace). Every tuned knob is listed: RDS takes at
    most :data:`RDS_MAX_PARAMETERS` a call, and refuses more rather than losing any."""

    file_name = "aws-rds-parameters.json"
    modes = frozenset({MANAGED})

    def render(self, rec: Recommendation) -> str:
        parameters = [{"ParameterName": k.name,
                       "ParameterValue": provider_value(k, booleans=("1", "0")),
                       "ApplyMethod": "pending-reboot" if k.restart else "immediate"}
                      for k in rec.knobs]  # over RDS_MAX_PARAMETERS the CLI refuses: split
        return json.dumps({"DBParameterGroupName": "REPLACE-WITH-YOUR-PARAMETER-GROUP",
                           "Parameters": parameters}, indent=2) + "\n"


class GcloudWriter(RecommendationWriter, kind="gcloud_sql"):
    """A shell line for ``gcloud sql instances patch`` (``$INSTANCE`` to set)."""

    file_name = "gcloud-sql-flags.sh"
    modes = frozenset({MANAGED})

    def render(self, rec: Recommendation) -> str:
        flags = ",".join(f"{k.name}={provider_value(k)}" for k in rec.knobs)
        restart = [k.name for k in rec.knobs if k.restart]
        return "\n".join([
            "# written by harmony tune: Cloud SQL for PostgreSQL database flags",
            "# --database-flags REPLACES every flag of the instance: add the ones it has",
            "# (gcloud sql instances describe \"$INSTANCE\"",
            "#  --format='value(settings.databaseFlags)')",
            *([f"# restarts the instance for {', '.join(restart)}"] if restart else []),
            f"gcloud sql instances patch \"$INSTANCE\" --database-flags={shlex.quote(flags)}",
            ""])


class AzureWriter(RecommendationWriter, kind="azure_flexible"):
    """One ``az postgres flexible-server parameter set`` per knob (``$RESOURCE_GROUP`` and
    ``$SERVER`` to set), and the restart static ones need."""

    file_name = "azure-parameters.sh"
    modes = frozenset({MANAGED})

    def render(self, rec: Recommendation) -> str:
        lines = ["# written by harmony tune: Azure Database for PostgreSQL flexible server"]
        for k in rec.knobs:
            lines.append(f"az postgres flexible-server parameter set --resource-group "
                         f"\"$RESOURCE_GROUP\" --server-name \"$SERVER\" --name {k.name} "
                         f"--value {shlex.quote(provider_value(k))}")
        if any(k.restart for k in rec.knobs):
            lines.append("az postgres flexible-server restart --resource-group "
                         "\"$RESOURCE_GROUP\" --name \"$SERVER\"")
        return "\n".join(lines) + "\n"
