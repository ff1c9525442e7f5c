"""``harmony tune --plan`` as the terminal shows it (:mod:`tuner_client.plan.planner` makes the
plan)."""

from __future__ import annotations

from tuner_client.plan.planner import Plan


def format_plan(plan: Plan) -> str:
    """The plan as the terminal shows it."""
    lines = [f"plan for {plan.config}",
             f"  target: {plan.target}"
             + (f" (PostgreSQL {plan.server_version})" if plan.server_version else ""),
             f"  memory budget: {plan.budget}"]
    lines += [f"    {d}" for d in plan.budget_detail]
    if plan.mode:
        lines += [f"  mode: {plan.mode[0]}"] + [f"    {m}" for m in plan.mode[1:]]
    if plan.live is not None:
        lines += ["", "live mode (workload.observe):"] + plan.live.lines()
    lines += ["", "knobs:"]
    for k in plan.knobs:
        narrowed = "" if k.after_budget == k.configured else f" -> {k.after_budget} (budget)"
        lines.append(f"  {k.phase:<8} {k.name:<32} now {k.current:<10} {k.configured}{narrowed}"
                     f"  [{k.context}{', restart' if k.restart else ''}]")
    lines += ["", f"phases (window: {plan.window_basis}):"]
    for p in plan.phases:
        when = f"~{_duration(p.seconds)}" if p.seconds is not None else "time unknown"
        lines.append(f"  {p.name:<10} {p.evaluations:>4} evaluations, {p.windows:>4} windows, "
                     f"{p.restarts:>3} restarts at most, {when}: {p.detail}")
        if p.design:
            lines.append(f"  {'':<10} design: {p.design}")
    total = plan.seconds
    lines.append(f"  total: at most {plan.restarts} restarts"
                 + (f", ~{_duration(total)}" if total is not None else ""))
    if plan.proposals:
        lines += ["", "what the workload shows:"]
        for pr in plan.proposals:
            lines.append(f"  {pr.symptom}: {', '.join(pr.knobs)}\n      {pr.evidence}")
    if plan.held:
        lines += ["", "held:"]
        lines += [f"  {name}: {why}" for name, why in plan.held]
    if plan.notes:
        lines += ["", "notes:"] + [f"  {n}" for n in plan.notes]
    return "\n".join(lines)


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    return f"{seconds / 60:.0f} min" if seconds >= 120 else f"{seconds:.0f} s"


__all__ = ["format_plan"]
