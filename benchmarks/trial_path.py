"""The files on a trial's path (issue 53's evidence table): the distinct project source files
on the call stack at the moment one search trial's workload measurement starts, in a real
``harmony tune`` run on the embedded cluster.

    python -m benchmarks.trial_path [--state-dir DIR] [--output DIR]

The run is the demo's config (``configs/tpch-demo.yaml``: TPC-H SF 0.01) trimmed to two
evaluations per search and one short final race. A profiler (:func:`sys.setprofile`, the main
thread) waits for the harmony server to hand out a trial (``Session.fetch`` returning one),
then takes the stack at the next call that starts the workload's measurement: a window's
``sample`` (a :class:`workloads.base.Workload` method) or a per-transaction assignment's
``run`` (``workloads/per_transaction``). It prints, for the first trial of each kind (the
offline search measures in windows, the online one per transaction), the stack's project
files in call order and their lines (the *stack*), and every project file a function of
which runs on the main thread from the fetch to the trial's report to the server (the
*span*: the stack's files and those the measurement calls, the apply, the record, the log).
Reproducible: the same stack whatever the timings; the span may differ by a file or two
with what happens in a trial (a failed apply, a restart).
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("harmony", "harmony_base", "harmony_core", "harmony_report", "harmony_server",
            "tuner_client", "workloads", "plugins", "strategies", "bme")
CONFIG = ROOT / "configs" / "tpch-demo.yaml"
#: the demo's config, trimmed: the searches' budgets and the final race's
TRIM = {r"(offline:(?:.|\n)*?evaluations: )\d+": r"\g<1>2",
        r"(online:(?:.|\n)*?evaluations: )\d+": r"\g<1>2",
        r"final: \{[^}]*\}": "final: {rounds: 1, max_rounds: 2, max_seconds: 10}"}


def project_file(filename: str) -> str | None:
    """``filename`` relative to the tree when it is one of the project's modules."""
    try:
        rel = Path(filename).resolve().relative_to(ROOT)
    except ValueError:
        return None
    return str(rel) if rel.parts and rel.parts[0] in PACKAGES else None


def kind_of(frame: FrameType) -> str | None:
    """``windows`` / ``per-transaction`` when ``frame`` starts a workload's measurement."""
    rel = project_file(frame.f_code.co_filename)
    if rel is None or not rel.startswith("workloads/"):
        return None
    name = frame.f_code.co_name
    if name == "run" and rel.startswith("workloads/per_transaction/"):
        return "per-transaction"
    if name == "sample" and "self" in frame.f_locals:
        return "windows"
    return None


def stack_files(frame: FrameType | None) -> list[str]:
    """The project files on the stack of ``frame``, outermost first, each once."""
    files: list[str] = []
    while frame is not None:
        rel = project_file(frame.f_code.co_filename)
        if rel is not None and rel not in files:
            files.insert(0, rel)
        elif rel is not None:  # keep the outermost position
            files.remove(rel)
            files.insert(0, rel)
        frame = frame.f_back
    return files


def _in_client(frame: FrameType, names: tuple[str, ...]) -> bool:
    return frame.f_code.co_name in names and (
        project_file(frame.f_code.co_filename) or "").endswith("api/client.py")


@dataclass
class Probe:
    """The profiler: armed by a fetched trial, it keeps the first stack of each kind and the
    files of the span from the fetch to the report."""

    armed: bool = False
    kind: str | None = None
    span: set[str] = field(default_factory=set)
    stacks: dict[str, list[str]] = field(default_factory=dict)
    spans: dict[str, list[str]] = field(default_factory=dict)

    def __call__(self, frame: FrameType, event: str, arg: object) -> None:
        if event == "return" and arg is not None and _in_client(frame, ("fetch",)):
            if not self.armed:
                self.armed, self.kind, self.span = True, None, set(stack_files(frame))
        elif event == "call" and self.armed:
            rel = project_file(frame.f_code.co_filename)
            if rel is not None:
                self.span.add(rel)
            kind = kind_of(frame)
            if kind is not None and kind not in self.stacks:
                self.stacks[kind] = stack_files(frame)
            if kind is not None and self.kind != "per-transaction":
                self.kind = kind  # a batch with a per-transaction run is one
            if _in_client(frame, ("report", "report_failure")):
                if self.kind is not None and self.kind not in self.spans:
                    self.spans[self.kind] = sorted(self.span)
                self.armed = False


def lines(rel: str) -> int:
    return len((ROOT / rel).read_text().splitlines())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--state-dir", type=Path, default=None)
    parser.add_argument("--output", type=Path, default=None)
    args = parser.parse_args()
    text = CONFIG.read_text()
    for pattern, replacement in TRIM.items():
        text, n = re.subn(pattern, replacement, text, count=1)
        if n != 1:
            raise SystemExit(f"{CONFIG}: no match for {pattern!r} to trim")
    work = Path(tempfile.mkdtemp(prefix="harmony-trial-path-"))
    config = work / "trial-path.yaml"
    config.write_text(text.replace("name: tpch-demo", "name: trial-path"))
    from harmony.cli import main as harmony_main

    probe = Probe()
    argv = ["tune", str(config), "--state-dir", str(args.state_dir or work / "state"),
            "--output", str(args.output or work / "out")]
    sys.setprofile(probe)
    try:
        code = harmony_main(argv)
    finally:
        sys.setprofile(None)
        shutil.rmtree(work, ignore_errors=True)  # the config, and the cluster unless named
    print(f"harmony tune: exit {code}")
    for kind, files in sorted(probe.stacks.items()):
        print(f"\n{kind} trial, stack: {len(files)} files, {sum(map(lines, files)):,} lines")
        for rel in files:
            print(f"  {rel} ({lines(rel)})")
    for kind, files in sorted(probe.spans.items()):
        print(f"\n{kind} trial, span: {len(files)} files, {sum(map(lines, files)):,} lines")
        print("  " + ", ".join(f"{rel} ({lines(rel)})" for rel in files))


if __name__ == "__main__":
    main()
