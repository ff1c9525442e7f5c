"""On a tie, the configuration that commits less memory.

A race's winner is the candidate with the highest ratio among those whose simultaneous
interval lies above 1. When another such candidate's ratio lies inside the winner's own
interval, the race cannot tell the two apart, and the highest point is the noise's choice:
in capture.s35 four of five races put PGTune's rules (work_mem 753MB) a hair above the
search's best (1.22× against 1.21×, 1.25× against 1.23×, ...), and pgbench read the two
within 2 % of each other. A DBA given two configurations that measure alike takes the one
that leaves more of the memory budget, so that is what is recommended: the tied candidate
with the most budget slack (:meth:`~tuner_client.budget.BudgetView.slack`). Its claim is its
own simultaneous interval, which lies above 1 as the winner's does, so what is claimed keeps
its level; the decision says which candidates tied and what each leaves.

Only races of one run (per transaction, switchback, duet: a
:class:`~tuner_client.stats.race_outcome.DesignRace`) are judged; compositions (a split, a
narrowing) keep their own winner.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping

from tuner_client.engine.protocol import RaceOutcome
from tuner_client.phases.decisions import Decision
from tuner_client.stats.race_outcome import DesignRace


def tied(race: DesignRace) -> list[str]:
    """The winner and every other candidate that clears 1 with its ratio inside the
    winner's simultaneous interval, winner first (empty without a winner)."""
    if race.winner is None:
        return []
    lead = race.comparisons[race.winner].interval
    return [race.winner, *(label for label, c in race.comparisons.items()
                           if label != race.winner and c.interval.above_one
                           and lead.low <= c.interval.ratio <= lead.high)]


def lighter_on_tie(outcome: RaceOutcome | None,
                   configurations: Mapping[str, Mapping[str, str]],
                   slack: Callable[[Mapping[str, str]], int | None],
                   decide: Callable[[Decision], None]) -> RaceOutcome | None:
    """``outcome`` with its winner replaced by the tied candidate that leaves the most memory
    budget (``slack`` of its configuration, bytes), said as a decision; unchanged when there
    is no tie, a slack cannot be read, or the winner leaves the most already."""
    if not isinstance(outcome, DesignRace):
        return outcome
    labels = tied(outcome)
    if len(labels) < 2 or any(label not in configurations for label in labels):
        return outcome
    slacks = {label: slack(configurations[label]) for label in labels}
    if any(s is None for s in slacks.values()):
        return outcome
    lighter = max(labels, key=lambda label: (slacks[label], label == outcome.winner))
    if lighter == outcome.winner:
        return outcome
    assert outcome.winner is not None
    lead = outcome.comparisons[outcome.winner].interval
    mib = {label: (s or 0) / 2**20 for label, s in slacks.items()}
    decide(Decision.note(
        f"final: {lighter} ({outcome.comparisons[lighter].interval.ratio:.2f}×) ties "
        f"{outcome.winner} ({lead.text()}): its ratio lies inside {outcome.winner}'s "
        f"interval, so the race cannot tell them apart; recommending {lighter}, which leaves "
        f"{mib[lighter]:,.0f} MiB of the memory budget against {mib[outcome.winner]:,.0f} MiB",
        labels=labels))
    return dataclasses.replace(outcome, winner=lighter)
