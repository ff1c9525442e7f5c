"""The memory-pressure rule of the validity table (:data:`tuner_client.engine.designs.VALIDITY`,
class ``memory-pressure``): when a candidate's work memory is high enough that a
per-transaction run, where it holds only its share of the transactions, would not feel what
the whole server under it would."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from tuner_client.budget import ONLINE_MEMORY_KNOBS, BudgetView

#: a candidate whose worst-case work memory takes more of the online budget than this share
#: races on the whole server (:func:`memory_pressure_reason`)
MEMORY_PRESSURE_SHARE = 0.4


def memory_pressure_reason(budget: BudgetView, in_force: Mapping[str, str],
                           candidates: Sequence[Mapping[str, str]]) -> str | None:
    """Why these candidates' race must run on the whole server: a candidate (after the first,
    the reference) changes an online memory knob (work_mem, maintenance_work_mem,
    temp_buffers) and its worst case takes more than
    :data:`MEMORY_PRESSURE_SHARE` of the online memory budget, and more than the reference's
    (None: none does). Knobs a candidate leaves out have their values ``in_force``.

    In a per-transaction run a candidate holds only its share of the transactions, so the
    server feels the average of the arms' work memory, not the candidate's. Measured, work_mem
    64kB→4MB on TPC-H 2Q6,6Q13 (scouts ``benchmarks/results/evidence_power.*2Q6,6Q13.md``, truths
    ``benchmarks/results/evidence_power.truth.s1[23]q*.md``), per transaction against 20
    whole-server window rounds, with the 4MB point's share of the
    default budget (work_mem counted hash_mem_multiplier 2 times per connection) and, in
    brackets, of a budget that counts it once (``budget.work_mem_held: 1``):

    - 320 MB cgroup, 208 % (142 %): 1.099× (1.071–1.129) against 1.002× (0.942–1.066);
    - 512 MB, 69 % (47 %): 1.128× (1.088–1.170) against 0.946× (0.860–1.042);
    - 1 GB, 25 % (17 %): 1.082× (1.044–1.122) against 1.080× (1.010–1.155), agreeing.

    The 40 % line lies between the agreeing cell and the disagreeing ones under either count."""
    reference = {**in_force, **candidates[0]}
    base = budget.online_share(reference)
    for config in candidates[1:]:
        changed = [n for n in ONLINE_MEMORY_KNOBS
                   if config.get(n, reference.get(n)) != reference.get(n)]
        if not changed:
            continue
        share = budget.online_share({**reference, **config})
        if share is not None and share > MEMORY_PRESSURE_SHARE and (base is None or share > base):
            return (f"{', '.join(changed)} differs between the candidates and one's worst case "
                    f"takes {100 * share:.0f} % of the online memory budget (over "
                    f"{100 * MEMORY_PRESSURE_SHARE:.0f} %): per transaction it held only its "
                    f"share of the transactions, so the server did not feel its memory "
                    f"pressure")
    return None
