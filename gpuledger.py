"""gpuledger: the command-line front door.

Thin by design: it parses arguments, opens the warehouse, calls the library (ingest/, models/,
dashboards/) and prints. Exit status: 0 success, 1 a clear error (one line: what and where),
2 bad usage or a command that has not landed yet.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

EXIT_OK, EXIT_ERROR, EXIT_USAGE = 0, 1, 2


class CliError(Exception):
    """An error the user can act on; printed as one line, exit status 1."""


class UsageError(Exception):
    """Bad usage; printed as one line, exit status 2."""


# ---------------------------------------------------------------- shared plumbing

def _db_path(args) -> Path:
    from ingest import warehouse
    return warehouse.resolve_path(getattr(args, "db", None))


def _open(args, read_only: bool = False):
    from ingest import warehouse
    try:
        return warehouse.connect(_db_path(args), read_only=read_only)
    except warehouse.WarehouseError as exc:
        raise CliError(str(exc)) from exc


def _say(args, msg: str) -> None:
    if not getattr(args, "quiet", False):
        print(msg, file=sys.stderr)


def _not_yet(command: str, issue: int) -> int:
    print(f"gpuledger {command}: not available yet (lands with issue #{issue})", file=sys.stderr)
    return EXIT_USAGE


def emit(df, fmt: str | None, out: str | None) -> None:
    """Write a Polars DataFrame as an aligned text table, CSV or JSON, to stdout or ``out``.

    The format defaults to the extension of ``out`` (.csv, .json, .parquet), else a text table.
    """
    import polars as pl
    if fmt is None:
        ext = Path(out).suffix.lower() if out else ""
        fmt = {".csv": "csv", ".json": "json", ".parquet": "parquet"}.get(ext, "table")
    if fmt == "parquet":
        if not out:
            raise UsageError("--format parquet needs --out FILE")
        df.write_parquet(out)
        return
    if fmt == "csv":
        text = df.write_csv()
    elif fmt == "json":
        text = json.dumps(df.to_dicts(), default=str, indent=1) + "\n"
    else:
        text = format_table(df)
    if out:
        Path(out).write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)


def format_table(df) -> str:
    """Every row and column, aligned; numbers right-aligned and floats to 2-4 significant places."""
    import polars as pl
    if df.height == 0:
        return "(no rows)\n"
    cols = df.columns
    cells = []
    for name in cols:
        s = df.get_column(name)
        if s.dtype.is_float():
            vals = ["" if v is None else f"{v:,.4g}" if abs(v) < 1 else f"{v:,.2f}" for v in s.to_list()]
        else:
            vals = ["" if v is None else str(v) for v in s.to_list()]
        cells.append(vals)
    numeric = [df.get_column(c).dtype.is_numeric() for c in cols]
    widths = [max(len(c), *(len(v) for v in vals)) for c, vals in zip(cols, cells)]
    def line(vals):
        return "  ".join(v.rjust(w) if num else v.ljust(w) for v, w, num in zip(vals, widths, numeric)).rstrip()
    rows = [line(cols), line(["-" * w for w in widths])]
    rows += [line([cells[j][i] for j in range(len(cols))]) for i in range(df.height)]
    return "\n".join(rows) + "\n"


def _print_ingest_summary(args, summary: dict) -> None:
    reasons = ", ".join(f"{n} {r}" for r, n in sorted(summary.get("skip_reasons", {}).items()))
    _say(args, f"{summary['input']}: read {summary['read']} lines: loaded {summary['loaded']} "
               f"(new {summary['inserted']}, updated {summary['updated']}, unchanged {summary['unchanged']}), "
               f"skipped {summary['skipped']}" + (f" [{reasons}]" if reasons else "")
               + f", rejected {summary['rejected']} (run {summary['run_id']})")
    for line in summary.get("reject_examples", []):
        print(line, file=sys.stderr)
    more = summary["rejected"] - len(summary.get("reject_examples", []))
    if more > 0:
        _say(args, f"  ... and {more} more rejected lines: see `rejects` (run {summary['run_id']})")


def _after_ingest(args, con) -> None:
    """Ingest keeps the marts and the serving snapshot current (``--no-refresh`` to batch several)."""
    if getattr(args, "no_refresh", False):
        return
    from models import refresh
    refresh.run(con, _db_path(args))


# ---------------------------------------------------------------- ingest

def cmd_ingest_sacct(args) -> int:
    from ingest import sacct
    con = _open(args)
    opts = sacct.SacctOptions(cluster=args.cluster, tz=args.tz, fields=args.fields, delimiter=args.delimiter,
                              strict=args.strict)
    if args.live:
        if args.files:
            raise UsageError("ingest sacct: give FILEs or --live, not both")
        summaries = [sacct.ingest_live(con, opts, since=args.since, sacct_cmd=args.sacct_cmd)]
    else:
        if not args.files:
            raise UsageError("ingest sacct: give one or more FILEs, '-' for stdin, or --live")
        summaries = [sacct.ingest_path(con, f, opts) for f in args.files]
    for s in summaries:
        _print_ingest_summary(args, s)
    _after_ingest(args, con)
    bad = args.strict and any(s["rejected"] for s in summaries)
    return EXIT_ERROR if bad else EXIT_OK


def cmd_ingest_nodes(args) -> int:
    from ingest import slurm_nodes
    con = _open(args)
    for f in args.files:
        s = slurm_nodes.ingest_path(con, f, fmt=args.format, cluster=args.cluster, as_of=args.as_of,
                                    retire_missing=args.retire_missing)
        _print_ingest_summary(args, s)
    _after_ingest(args, con)
    return EXIT_OK


def cmd_ingest_events(args) -> int:
    from ingest import slurm_events
    con = _open(args)
    for f in args.files:
        s = slurm_events.ingest_path(con, f, cluster=args.cluster, tz=args.tz)
        _print_ingest_summary(args, s)
    _after_ingest(args, con)
    return EXIT_OK


def cmd_ingest_prometheus(args) -> int:
    return _not_yet("ingest prometheus", 3)


def cmd_ingest_dcgm(args) -> int:
    return _not_yet("ingest dcgm", 3)


def cmd_ingest_nvidia_smi(args) -> int:
    return _not_yet("ingest nvidia-smi", 3)


def cmd_ingest_trace(args) -> int:
    return _not_yet("ingest trace", 4)


def cmd_ingest_governance(args) -> int:
    return _not_yet("ingest governance", 6)


# ---------------------------------------------------------------- marts, reports, finance

def cmd_refresh(args) -> int:
    from models import refresh
    con = _open(args)
    done = refresh.run(con, _db_path(args), full=args.full)
    for name, secs in done:
        _say(args, f"refreshed {name} in {secs:.2f} s")
    return EXIT_OK


def cmd_report_utilization(args) -> int:
    return _not_yet("report utilization", 5)


def cmd_report_fragmentation(args) -> int:
    return _not_yet("report fragmentation", 5)


def cmd_report_efficiency(args) -> int:
    return _not_yet("report efficiency", 3)


def cmd_report_fairness(args) -> int:
    return _not_yet("report fairness", 6)


def cmd_report_queue(args) -> int:
    return _not_yet("report queue", 6)


def cmd_chargeback(args) -> int:
    return _not_yet("chargeback", 6)


def cmd_forecast(args) -> int:
    return _not_yet("forecast", 7)


def cmd_simulate(args) -> int:
    return _not_yet("simulate", 8)


def cmd_simulate_placement(args) -> int:
    return _not_yet("simulate placement", 8)


def cmd_plan(args) -> int:
    return _not_yet("plan", 8)


def cmd_dashboard(args) -> int:
    return _not_yet("dashboard", 9)


def cmd_demo(args) -> int:
    return _not_yet("demo", 4)


# ---------------------------------------------------------------- the parser

def _report_parent() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--from", dest="date_from", metavar="D", help="start of the window (UTC date or time, inclusive)")
    p.add_argument("--to", dest="date_to", metavar="D", help="end of the window (UTC date or time, exclusive)")
    p.add_argument("--by", default="", metavar="COLS", help="comma-separated grouping columns")
    p.add_argument("--bucket", choices=["hour", "day", "week", "month"], default="day", help="time bucket")
    p.add_argument("--format", choices=["table", "csv", "json", "parquet"], help="output format (default: by --out extension, else table)")
    p.add_argument("--out", metavar="FILE", help="write to FILE instead of stdout")
    return p


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="gpuledger",
        description="Capacity planning and cost governance for shared GPU clusters, from Slurm accounting and DCGM telemetry.")
    p.add_argument("--db", metavar="PATH", help="warehouse file (default $GPULEDGER_DB, else data/warehouse.duckdb)")
    p.add_argument("-q", "--quiet", action="store_true", help="print only results and errors")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    ing = sub.add_parser("ingest", help="load scheduler accounting, inventory, telemetry, traces or governance")
    ising = ing.add_subparsers(dest="source", metavar="SOURCE")
    ising.required = True

    s = ising.add_parser("sacct", help="Slurm accounting: `sacct --parsable2` output, or run sacct itself (--live)",
                         description="Load `sacct -P`/`--parsable` output (header line optional; steps are counted "
                                     "as skipped). With --live, run sacct from the last watermark.")
    s.add_argument("files", nargs="*", metavar="FILE", help="sacct output files, '-' for stdin")
    s.add_argument("--cluster", help="cluster name when the input has no Cluster column")
    s.add_argument("--tz", help="zone of times printed without an offset (default: the cluster's zone, else UTC)")
    s.add_argument("--fields", help="comma-separated column names for headerless input (default: Open XDMoD's list)")
    s.add_argument("--delimiter", help="field separator (default: '^|^' if seen on the first line, else '|')")
    s.add_argument("--strict", action="store_true", help="exit 1 if any line is rejected")
    s.add_argument("--live", action="store_true", help="run sacct itself (TZ=UTC) from the last watermark")
    s.add_argument("--since", metavar="TIME", help="with --live: start time instead of the watermark")
    s.add_argument("--sacct-cmd", default=os.environ.get("GPULEDGER_SACCT", "sacct"), help=argparse.SUPPRESS)
    s.add_argument("--no-refresh", action="store_true", help="do not refresh marts after loading")
    s.set_defaults(func=cmd_ingest_sacct)

    s = ising.add_parser("nodes", help="node inventory: `scontrol show node [-o]` or sinfo output with Gres")
    s.add_argument("files", nargs="+", metavar="FILE", help="'-' for stdin")
    s.add_argument("--format", choices=["auto", "scontrol", "sinfo"], default="auto")
    s.add_argument("--cluster", default=None, help="cluster name (default: 'default' or the only one known)")
    s.add_argument("--as-of", metavar="TIME", help="when the snapshot was taken (UTC; default now)")
    s.add_argument("--retire-missing", action="store_true",
                   help="nodes absent from this snapshot leave the inventory as of --as-of")
    s.add_argument("--no-refresh", action="store_true", help="do not refresh marts after loading")
    s.set_defaults(func=cmd_ingest_nodes)

    s = ising.add_parser("events", help="node outages: `sacctmgr -P show event All_Time`")
    s.add_argument("files", nargs="+", metavar="FILE", help="'-' for stdin")
    s.add_argument("--cluster", default=None, help="cluster name when the input has no Cluster column")
    s.add_argument("--tz", help="zone of times printed without an offset")
    s.add_argument("--no-refresh", action="store_true", help="do not refresh marts after loading")
    s.set_defaults(func=cmd_ingest_events)

    s = ising.add_parser("prometheus", help="DCGM exporter series over the Prometheus HTTP API")
    s.add_argument("--url", required=True)
    s.add_argument("--start", required=True, metavar="T")
    s.add_argument("--end", required=True, metavar="T")
    s.add_argument("--step", default="60s")
    s.add_argument("--match", metavar="SELECTOR")
    s.set_defaults(func=cmd_ingest_prometheus)

    s = ising.add_parser("dcgm", help="scraped DCGM exporter /metrics text files")
    s.add_argument("files", nargs="+", metavar="FILE")
    s.set_defaults(func=cmd_ingest_dcgm)

    s = ising.add_parser("nvidia-smi", help="`nvidia-smi --query-gpu ... --format=csv` logs")
    s.add_argument("files", nargs="+", metavar="FILE")
    s.set_defaults(func=cmd_ingest_nvidia_smi)

    s = ising.add_parser("trace", help="public GPU cluster traces (alibaba-openb, mit-supercloud, ...)")
    s.add_argument("kind")
    s.add_argument("path")
    s.set_defaults(func=cmd_ingest_trace)

    s = ising.add_parser("governance", help="teams, cost centres, entitlements, rates and policies (TOML)")
    s.add_argument("file", metavar="FILE.toml")
    s.set_defaults(func=cmd_ingest_governance)

    s = sub.add_parser("refresh", help="(re)materialise the marts and publish the dashboard snapshot")
    s.add_argument("--full", action="store_true", help="rebuild every mart from scratch")
    s.set_defaults(func=cmd_refresh)

    rep = sub.add_parser("report", help="utilization, efficiency, fragmentation, fairness and queue reports")
    isrep = rep.add_subparsers(dest="report", metavar="REPORT")
    isrep.required = True
    parent = _report_parent()
    for name, func, text in [
        ("utilization", cmd_report_utilization, "capacity, allocated, idle and unavailable GPU-hours; sreport categories"),
        ("efficiency", cmd_report_efficiency, "how busy allocated GPUs were, from telemetry"),
        ("fragmentation", cmd_report_fragmentation, "free GPUs that pending jobs could not use"),
        ("fairness", cmd_report_fairness, "usage against entitlement, fair-share factors, Jain and Gini"),
        ("queue", cmd_report_queue, "queue waits per team and size class, starvation"),
    ]:
        s = isrep.add_parser(name, parents=[parent], help=text, description=text)
        s.set_defaults(func=func)

    s = sub.add_parser("chargeback", help="monthly statement per team and cost centre, reconciled to the cent")
    s.add_argument("--period", required=True, metavar="YYYY-MM")
    s.add_argument("--out", metavar="FILE", help="FILE.csv, FILE.xlsx or FILE.parquet")
    s.add_argument("--close", action="store_true", help="freeze the period's statement")
    s.set_defaults(func=cmd_chargeback)

    s = sub.add_parser("forecast", help="GPU demand forecasts with intervals and capacity exhaustion dates")
    s.add_argument("--by", default="pool", metavar="COLS")
    s.add_argument("--horizon", type=int, default=90, metavar="N")
    s.add_argument("--series", metavar="FILE.csv")
    s.add_argument("--out", metavar="FILE")
    s.add_argument("--plot", metavar="FILE.html")
    s.set_defaults(func=cmd_forecast)

    s = sub.add_parser("simulate", help="what-if replay of the workload through a scheduler simulator")
    s.add_argument("--add", action="append", default=[], metavar="POOL=N")
    s.add_argument("--remove", action="append", default=[], metavar="POOL=N")
    s.add_argument("--demand-scale", type=float, default=1.0, metavar="X")
    s.add_argument("--runtime-scale", type=float, default=1.0, metavar="X")
    s.add_argument("--policy", default="fifo-backfill")
    s.add_argument("--from", dest="date_from", metavar="D")
    s.add_argument("--to", dest="date_to", metavar="D")
    s.set_defaults(func=cmd_simulate)
    simsub = s.add_subparsers(dest="sim_command", metavar="placement")
    sp = simsub.add_parser("placement", help="FGD-paper placement protocol on an Alibaba openb trace")
    sp.add_argument("--trace", required=True, metavar="PATH")
    sp.add_argument("--policy", required=True, metavar="NAME")
    sp.add_argument("--seeds", type=int, default=10, metavar="N")
    sp.add_argument("--out", metavar="FILE")
    sp.set_defaults(func=cmd_simulate_placement)

    s = sub.add_parser("plan", help="smallest capacity that meets a p95 queue-wait target")
    s.add_argument("--target-p95-wait", required=True, metavar="DURATION")
    s.add_argument("--pool", metavar="POOL")
    s.set_defaults(func=cmd_plan)

    s = sub.add_parser("dashboard", help="serve the Streamlit dashboards on 127.0.0.1")
    s.add_argument("--port", type=int, default=8501)
    s.set_defaults(func=cmd_dashboard)

    s = sub.add_parser("demo", help="build the demo warehouse from a synthetic cluster and serve the dashboard")
    s.add_argument("--scale", type=float, default=1.0, metavar="N")
    s.set_defaults(func=cmd_demo)
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    from ingest.warehouse import WarehouseError
    try:
        return args.func(args) or EXIT_OK
    except UsageError as exc:
        print(f"gpuledger: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except (CliError, WarehouseError) as exc:
        print(f"gpuledger: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except BrokenPipeError:
        return EXIT_OK
    except KeyboardInterrupt:
        print("gpuledger: interrupted; the batch in progress was rolled back", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
