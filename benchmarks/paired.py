"""Two trees of jobgate measured at the same time: a ratio a noisy machine cannot give run after run.

    python benchmarks/paired.py --other /path/to/other/checkout/src [--backend sqlite] [--rounds 4]

On a shared VM the same tree drains 15 % faster or slower from one minute to the next, so two
trees measured one after the other differ by more than the few per cent a change is worth.
Here each round starts ``throughput.py`` twice at once, once with this checkout's ``src`` and
once with ``--other`` (a ``git worktree`` of another commit, say), each with one worker
process, its own database (a SQLite file in its own folder; on PostgreSQL ``jobgate_bench`` for
this tree and ``jobgate_bench2`` for the other, dropped and created again each round) and its
own Redis sink for the job body (databases 14 and 13). The two share the machine's cores, so
whatever slows the machine slows both, and the ratio of their figures is the ratio of their
costs; the start order alternates between rounds. ``--other-env KEY=VALUE`` sets a variable
for the other tree's processes only.

Prints each round's figures and ratios (this / other), their medians and the machine, and ends
with one line: RESULT backend=... rounds=N process_ratio=X end_to_end_ratio=X worker_cpu_ratio=X
submitter_cpu_ratio=X (the CPU a job cost each tree's own worker and submitting processes, end to
end: above 1, this tree costs more).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psycopg
from figures import machine
from sqlalchemy.engine import make_url

HERE = Path(__file__).resolve().parent
THIS_SRC = HERE.parent / "src"
FIGURES = ("process_per_s", "end_to_end_per_s")
# CPU a job end to end spent by each tree's own processes (its workers, its submitting process):
# a cost, steadier than a rate, and each side's own (the machine-wide figures mix the two trees).
COSTS = ("e2e_cpu_us_worker", "e2e_cpu_us_submitter")
DATABASES = ("jobgate_bench", "jobgate_bench2")  # this tree's, the other's
SINKS = ("redis://127.0.0.1:6379/14", "redis://127.0.0.1:6379/13")


def fresh_databases(server: str) -> list[str]:
    """Drop and create both benchmark databases on ``server`` (a PostgreSQL URL); their URLs.
    Fresh each round: a database migrated by the newer tree refuses the older one."""
    url = make_url(server)
    admin = url.set(drivername="postgresql", database="postgres").render_as_string(hide_password=False)
    with psycopg.connect(admin, autocommit=True) as conn:
        for name in DATABASES:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            conn.execute(f'CREATE DATABASE "{name}"')
    return [url.set(database=name).render_as_string(hide_password=False) for name in DATABASES]


def one_side(
    src: Path, extra_env: dict[str, str], sink: str, args: argparse.Namespace, db: str | None
) -> dict[str, float]:
    """One ``throughput.py`` run of the tree at ``src``; the figures of its RESULT line."""
    env = dict(os.environ, PYTHONPATH=str(src), BENCH_SINK_URL=sink, **extra_env)
    cmd = [sys.executable, str(HERE / "throughput.py"), "--backend", args.backend, "--jobs", str(args.jobs)]
    cmd += ["--workers", "1", "--single", "10", "--latency-jobs", "10"]
    if db is not None:
        cmd += ["--db", db]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if done.returncode != 0 or not lines:
        raise SystemExit(
            f"throughput.py failed for {src} (exit {done.returncode}):\n{done.stdout[-2000:]}{done.stderr[-2000:]}"
        )
    pairs = (item.split("=", 1) for item in lines[-1].split()[1:] if "=" in item)
    return {k: float(v) for k, v in pairs if k in FIGURES or k in COSTS}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--other", type=Path, required=True, help="the other tree's src folder")
    p.add_argument("--other-env", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--backend", choices=["sqlite", "postgres"], default="sqlite")
    p.add_argument("--db", default="postgresql://postgres@127.0.0.1:5432/postgres", help="the PostgreSQL server")
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--jobs", type=int, default=20000)
    args = p.parse_args()
    if not (args.other / "jobgate").is_dir():
        raise SystemExit(f"--other: {args.other} holds no jobgate package")
    other_env = dict(item.split("=", 1) for item in args.other_env if "=" in item)
    print(f"machine: {machine()}")
    print(f"this tree: {THIS_SRC}; other tree: {args.other} {other_env or ''}")
    ratios: dict[str, list[float]] = {f: [] for f in (*FIGURES, *COSTS)}
    for n in range(args.rounds):
        dbs: list[str | None] = [None, None]
        if args.backend == "postgres":
            dbs = list(fresh_databases(args.db))
        sides = [(THIS_SRC, {}, SINKS[0], dbs[0]), (args.other, other_env, SINKS[1], dbs[1])]
        order = sides if n % 2 == 0 else sides[::-1]  # who starts first alternates
        with ThreadPoolExecutor(2) as pool:  # both at once
            done = list(pool.map(lambda side: one_side(side[0], side[1], side[2], args, side[3]), order))
        this, other = done if n % 2 == 0 else done[::-1]
        line = []
        for f in (*FIGURES, *COSTS):
            if f not in this or f not in other:  # a cost the benchmark could not take this round
                continue
            ratio = this[f] / other[f]
            ratios[f].append(ratio)
            line.append(f"{f} this {this[f]:.0f} other {other[f]:.0f} ratio {ratio:.3f}")
        print(f"round {n + 1}: " + "; ".join(line), flush=True)
    medians = {f: statistics.median(v) for f, v in ratios.items() if v}
    print("medians of the rounds' ratios (this / other): " + ", ".join(f"{f} {m:.3f}" for f, m in medians.items()))
    costs = "".join(f" {f.removeprefix('e2e_cpu_us_')}_cpu_ratio={medians[f]:.3f}" for f in COSTS if f in medians)
    print(
        f"RESULT backend={args.backend} rounds={args.rounds} jobs={args.jobs} "
        f"process_ratio={medians['process_per_s']:.3f} end_to_end_ratio={medians['end_to_end_per_s']:.3f}{costs}"
    )


if __name__ == "__main__":
    main()
