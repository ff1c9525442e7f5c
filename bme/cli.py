"""``harmony bme ...``: fit, size, partition, reclaim and Mattson-stack commands (their options
are in :mod:`harmony.cli.bme_parser`, which imports this module only when one runs).

Each prints a readable table, or JSON with ``--json``. Bad input raises
:class:`ConfigError`, which the ``harmony`` entry point (and :func:`main` here) turn into a
message on stderr and exit code 2.
"""

from __future__ import annotations

import argparse
import json
import logging
from typing import Any

import numpy as np

from bme.equation import PARAM_KEYS
from bme.files import read_curve_csv, read_params_json, read_params_list_json
from bme.fit import BMEFit, fit_bme
from bme.mattson import read_trace, stack_histogram
from bme.partition import partition
from bme.reclaim import fair_reclaim
from bme.size import size_for_target
from harmony_base.errors import ConfigError
from harmony_base.jsontypes import JSONObject

logger = logging.getLogger(__name__)


def _emit(args: argparse.Namespace, payload: dict[str, Any], table: list[tuple[str, str]]) -> int:
    if args.json:
        print(json.dumps(payload, indent=2))
    else:
        width = max(len(k) for k, _ in table)
        for key, value in table:
            print(f"{key:<{width}}  {value}")
    return 0


def _fit_rows(fit: BMEFit) -> list[tuple[str, str]]:
    rows = [(k, f"{getattr(fit.params, k):.6g}") for k in PARAM_KEYS]
    rows.append(("r2", f"{fit.r2:.4f}"))
    return rows


def _fit_payload(fit: BMEFit) -> JSONObject:
    return {**fit.params.to_dict(), "r2": fit.r2, "n_points": fit.n_points, "rmse": fit.rmse}


def cmd_fit(args: argparse.Namespace) -> int:
    sizes, misses = read_curve_csv(args.data)
    try:
        fit = fit_bme(sizes, misses, p_star=args.p_star)
    except ConfigError as exc:
        raise ConfigError(f"{args.data}: {exc}") from None
    return _emit(args, _fit_payload(fit), _fit_rows(fit) + [("points", str(fit.n_points))])


def cmd_size(args: argparse.Namespace) -> int:
    params = read_params_json(args.params)
    size = size_for_target(params, args.target)
    return _emit(args, {"size": size, "target": args.target},
                 [("target", f"{args.target:.6g}"), ("size", f"{size:.6g}")])


def cmd_partition(args: argparse.Namespace) -> int:
    fits = []
    for path in args.data:
        sizes, misses = read_curve_csv(path)
        try:
            fits.append(fit_bme(sizes, misses))
        except ConfigError as exc:
            raise ConfigError(f"{path}: {exc}") from None
    result = partition([f.params for f in fits], args.total, weights=args.weights,
                       max_miss=args.max_miss)
    payload = {**result.to_dict(), "pools": [
        {"data": path, **_fit_payload(fit)} for path, fit in zip(args.data, fits, strict=True)]}
    table = [("pool", "size  miss  (data, fit r2)")]
    for i, path in enumerate(args.data):
        table.append((str(i), f"{result.sizes[i]}  {result.miss[i]:.6g}  "
                              f"({path}, r2 {fits[i].r2:.4f})"))
    table.append(("aggregate_miss", f"{result.aggregate_miss:.6g}"))
    return _emit(args, payload, table)


def cmd_reclaim(args: argparse.Namespace) -> int:
    params = read_params_list_json(args.params)
    result = fair_reclaim(params, args.sizes, args.delta, exact=args.exact,
                          integral=args.integer)
    table = [("pool", "delta  size  P/P*")]
    for i in range(len(params)):
        table.append((str(i), f"{result.deltas[i]:.6g}  {result.sizes[i]:.6g}  "
                              f"{result.ratios[i]:.4g}"))
    return _emit(args, result.to_dict(), table)


def cmd_mattson(args: argparse.Namespace) -> int:
    if args.points < 0:
        raise ConfigError(f"--points must be >= 0, got {args.points}")
    hist = stack_histogram(read_trace(args.trace))
    distinct = hist.distinct_pages
    if args.points == 0 or args.points >= distinct:
        sizes = np.arange(1, distinct + 1)
    else:
        sizes = np.unique(np.round(np.geomspace(1, distinct, args.points)).astype(np.int64))
    misses = hist.miss_probability(sizes)
    p_star = distinct / hist.n_refs
    fit: BMEFit | None = None
    reason = ""
    try:
        fit = fit_bme(sizes, misses, p_star=p_star)
    except ConfigError as exc:       # e.g. fewer than 3 distinct pages
        reason = str(exc)
    payload: JSONObject = {"n_refs": hist.n_refs, "distinct_pages": distinct,
                               "sizes": sizes.tolist(), "miss": misses.tolist(),
                               "fit": _fit_payload(fit) if fit else None}
    if args.json:
        if fit is None:
            payload["fit_error"] = reason
        print(json.dumps(payload, indent=2))
        return 0
    print(f"references {hist.n_refs}, distinct pages {distinct}, P* = {p_star:.6g}")
    print(f"{'size':>10}  {'miss':>10}  {'fitted':>10}")
    predicted = fit.predict(sizes) if fit else np.full(sizes.size, np.nan)
    for s, p, q in zip(sizes, misses, np.atleast_1d(predicted), strict=True):
        print(f"{int(s):>10}  {p:>10.6f}  {q:>10.6f}")
    if fit:
        for key, value in _fit_rows(fit):
            print(f"{key:<7} {value}")
    else:
        print(f"no fit: {reason}")
    return 0
