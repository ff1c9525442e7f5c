"""What ratio a comparison estimates: the throughput the workload's own client counts
(issue 45, item 3), from per-template mean latencies under each configuration.

A closed-loop client's count depends on how it picks its next transaction, so the same
per-template speedups make different throughput ratios under two client models:

- **draws** (pgbench ``-f script@weight``, the tuner's scripts and ``.sql`` lists, a replay
  taking captured units in turn): every transaction's template is drawn from a fixed mix,
  so the mix by count is fixed and a client's rate is 1 / (mean latency of the mix):

      ratio = Σ_t N_tA m_tA / Σ_t N_tA m_tB     (= 1 / L, L = Σ_t w_t m_tB / m_tA)

  with ``N_tA`` the reference's count of template t (the mix drawn) and ``w_t`` its share
  of the reference's time: the work-weighted latency ratio of
  :mod:`tuner_client.stats.per_transaction` is exactly this count ratio.
- **loops** (a TPC-H stream loops its one query; ``n_t`` streams run template t): each
  stream's rate is 1 / m_t, so the queries per second are ``Σ_t n_t / m_t`` and

      ratio = Σ_t n_t / m_tB / Σ_t n_t / m_tA

  which weighs each template's speedup by its share of the completions, not of the time:
  on the demo's mix parallel workers 2 → 0 read 1.305× (1.269–1.341) by count and 1.112×
  (1.090–1.135) work-weighted in the same windows (``benchmarks/results/estimands.s13.md``).
  Under the draws formula a per-transaction run of TPC-H streams would estimate the second
  number; the user's queries per minute is the first.

Both are computed as ``L`` = 1 / ratio (the latency convention of the callers), over the
templates seen under both configurations. :meth:`Estimand.influence` is each slice's
derivative of ``log L`` by its weight (the block bootstrap's kurtosis check and the
anytime-valid race use it); :meth:`Estimand.slice_log_speedups` gives the per-slice values
a confidence sequence takes: for draws each arm's time over what the reference's
per-template means predict for the same transactions, for loops the slices' pseudo-values
``-(log L + n·z_s)`` (the infinitesimal jackknife: their mean is the estimate's log, their
spread its delta-method standard error), since a ratio of completion rates has no
per-slice form that stays unbiased when a slice misses a template.

Pure: numpy only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from harmony_base.errors import ConfigError

DRAWS = "draws"
LOOPS = "loops"
#: what the ratio counts, by client model, for the decisions
COUNTS = {DRAWS: "transactions per second of the mix (each client draws its next transaction)",
          LOOPS: "queries per second of the streams (each stream loops its query)"}


@dataclass(frozen=True)
class Estimand:
    """The client model of a comparison: ``loops`` None (draws), or the number of clients
    looping each template, by template index (the trace's ``templates`` order)."""

    loops: tuple[float, ...] | None = None

    @classmethod
    def for_templates(cls, templates: Sequence[str], loops: Mapping[str, int] | None
                      ) -> Estimand:
        """The estimand of a trace whose templates are ``templates``: draws when ``loops``
        is None, else the streams looping each (a template no stream loops is refused)."""
        if loops is None:
            return cls()
        missing = [t for t in templates if loops.get(t, 0) <= 0]
        if missing:
            raise ConfigError(f"a loops estimand needs the streams of every template, but "
                              f"{', '.join(missing)} has none (streams: {dict(loops)})")
        return cls(tuple(float(loops[t]) for t in templates))

    @property
    def model(self) -> str:
        return DRAWS if self.loops is None else LOOPS

    def text(self) -> str:
        """What the ratio counts, for the decisions."""
        return COUNTS[self.model]

    def _streams(self, templates: int) -> np.ndarray:
        assert self.loops is not None
        n = np.zeros(templates)
        k = min(templates, len(self.loops))
        n[:k] = self.loops[:k]
        return n

    def latency_ratio(self, sums: np.ndarray, counts: np.ndarray) -> np.ndarray:
        """``L`` (1 / the throughput ratio B over A) from sums and counts of shape
        (..., templates, 2); NaN when no template is seen under both arms."""
        both = (counts[..., 0] > 0) & (counts[..., 1] > 0)
        with np.errstate(divide="ignore", invalid="ignore"):
            if self.loops is None:
                mean = sums / counts
                ratio = np.where(both, mean[..., 1] / mean[..., 0], 0.0)
                work = np.where(both, sums[..., 0], 0.0)
                return np.asarray((work * ratio).sum(axis=-1) / work.sum(axis=-1))
            n = self._streams(sums.shape[-2])
            rate = np.where(both[..., None], n[:, None] * counts / sums, 0.0)
            return np.asarray(rate[..., 0].sum(axis=-1) / rate[..., 1].sum(axis=-1))

    def influence(self, sums: np.ndarray, counts: np.ndarray, total_s: np.ndarray,
                  total_n: np.ndarray) -> np.ndarray:
        """Each slice's influence on ``log L`` (its derivative by the slice's weight) at
        totals of shape (resamples, templates, 2): shape (slices, resamples)."""
        both = (total_n[..., 0] > 0) & (total_n[..., 1] > 0)
        if self.loops is None:
            # L = Σ_t N_tA m_tB / Σ_t S_tA over the templates seen in both arms
            with np.errstate(divide="ignore", invalid="ignore"):
                mean_b = np.where(both, total_s[..., 1] / total_n[..., 1], 0.0)
                share = np.where(both, total_n[..., 0] / total_n[..., 1], 0.0)
            at_b = (total_n[..., 0] * mean_b).sum(axis=-1)
            spent_a = np.where(both, total_s[..., 0], 0.0).sum(axis=-1)
            return np.asarray((counts[..., 0] @ mean_b.T + sums[..., 1] @ share.T
                               - counts[..., 1] @ (share * mean_b).T) / at_b
                              - (sums[..., 0] @ both.T.astype(float)) / spent_a)
        # log L = log D_A - log D_B, D_k = Σ_t n_t N_tk / S_tk: d log D_k is
        # Σ_t q_tk (dN_tk / N_tk - dS_tk / S_tk), q_tk = n_t N_tk / S_tk / D_k
        n = self._streams(total_s.shape[-2])
        with np.errstate(divide="ignore", invalid="ignore"):
            rate = np.where(both[..., None], n[:, None] * total_n / total_s, 0.0)
            q = rate / rate.sum(axis=-2, keepdims=True)
            per_n = np.where(both[..., None], q / total_n, 0.0)
            per_s = np.where(both[..., None], q / total_s, 0.0)
        d = [counts[..., k] @ per_n[..., k].T - sums[..., k] @ per_s[..., k].T for k in (0, 1)]
        return np.asarray(d[0] - d[1])

    def slice_log_speedups(self, sums: np.ndarray, counts: np.ndarray) -> np.ndarray:
        """Per slice (rows of ``sums``/``counts``, shape (slices, templates, 2)) a value
        whose mean estimates ``log(1 / L)``, for a confidence sequence over slices; slices
        missing an arm are dropped."""
        if self.loops is not None:
            has_both = (counts.sum(axis=1) > 0).all(axis=1)
            sums, counts = sums[has_both], counts[has_both]
            if sums.shape[0] == 0:
                return np.zeros(0)
            total_s, total_n = sums.sum(axis=0), counts.sum(axis=0)
            log_l = float(np.log(self.latency_ratio(total_s, total_n)))
            z = self.influence(sums, counts, total_s[None], total_n[None])[:, 0]
            return np.asarray(-(log_l + sums.shape[0] * z))
        total_s, total_n = sums.sum(axis=0), counts.sum(axis=0)
        with np.errstate(divide="ignore", invalid="ignore"):
            cost = np.where(total_n[:, 0] > 0, total_s[:, 0] / total_n[:, 0], np.nan)
        usable = ~np.isnan(cost)
        expected = np.einsum("stk,t->sk", counts[:, usable, :], cost[usable])
        spent = sums[:, usable, :].sum(axis=1)
        ok = (expected > 0).all(axis=1)
        relative = spent[ok] / expected[ok]
        return np.asarray(np.log(relative[:, 0] / relative[:, 1]))


#: the estimand of a workload whose clients draw each transaction (the default)
DRAWN = Estimand()
