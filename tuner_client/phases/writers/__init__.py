"""The recommendation's file formats: one :class:`RecommendationWriter` per format, registered
by kind (:mod:`.base` holds the interface and the :class:`Recommendation` record; :mod:`.sql`
the SQL and conf formats; :mod:`.providers` the managed providers' CLIs). Importing this
package registers every format."""

from tuner_client.phases.writers.base import (
    MANAGED,
    SERVER,
    Recommendation,
    RecommendationWriter,
    RecommendedKnob,
    writers_for,
)
from tuner_client.phases.writers.providers import AwsRdsWriter, AzureWriter, GcloudWriter
from tuner_client.phases.writers.sql import (
    AlterDatabaseWriter,
    AlterRoleWriter,
    AlterSystemWriter,
    ConfFragmentWriter,
)

__all__ = [
    "MANAGED",
    "SERVER",
    "AlterDatabaseWriter",
    "AlterRoleWriter",
    "AlterSystemWriter",
    "AwsRdsWriter",
    "AzureWriter",
    "ConfFragmentWriter",
    "GcloudWriter",
    "Recommendation",
    "RecommendationWriter",
    "RecommendedKnob",
    "writers_for",
]
