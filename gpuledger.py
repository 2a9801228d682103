"""gpuledger: the command-line front door.

Thin by design: it parses arguments, opens the warehouse, calls the library (ingest/, models/,
dashboards/) and prints. Exit status: 0 success, 1 a clear error (one line: what and where),
2 bad usage. Imports of the library wait inside the commands so that ``gpuledger --help`` stays fast.
Every text printed from data (names, file names, rejected lines) goes through ``dashboards.terminal.escape``.
"""
from __future__ import annotations

import argparse
import datetime as dt
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


def _err(msg: str, multiline: bool = True) -> None:
    """``msg`` on stderr, terminal controls escaped (also under --quiet: errors and rejects)."""
    from dashboards.terminal import escape
    print(escape(msg, multiline=multiline), file=sys.stderr)


def _say(args, msg: str) -> None:
    """A note on stderr unless --quiet."""
    if not getattr(args, "quiet", False):
        _err(msg)


def _print(msg: str) -> None:
    """``msg`` on stdout, terminal controls escaped."""
    from dashboards.terminal import escape
    print(escape(msg, multiline=True))


def _freshness(args, con, window: bool = True) -> None:
    """Say when the marts a report read are older than the accounting (reads never rebuild them), and (``window``)
    when its --from/--to window lies wholly outside the accounting."""
    from models.definitions.times import parse_window
    from models.metrics import freshness
    lo, hi = parse_window(getattr(args, "date_from", None), getattr(args, "date_to", None))   # checked by _window
    for note in (freshness.note(con), freshness.window_note(con, lo, hi) if window else None):
        if note:
            _say(args, note)


def _progress(args, what: str):
    """A one-line counter on a terminal's stderr; nothing when piped or --quiet."""
    if getattr(args, "quiet", False) or not sys.stderr.isatty():
        return None

    def show(i: int, n: int) -> None:
        print(f"\r{what}: {i}/{n}", end="\n" if i == n else "", file=sys.stderr, flush=True)
    return show


def _names(text: str | None) -> list[str]:
    """A comma-separated option value as a list of names."""
    return [c.strip() for c in (text or "").split(",") if c.strip()]


def _time(value, opt: str, tz: str | None = None):
    """A time option as naive UTC, read by the one parser of users' times (ISO 8601 or epoch seconds; ``tz``
    for times without an offset); unreadable: bad usage naming the option."""
    from ingest.warehouse import parse_time
    try:
        return parse_time(value, opt, tz)
    except ValueError as exc:
        raise UsageError(str(exc)) from exc


def _duration(value, opt: str) -> int:
    """A duration option in whole seconds, read by the one parser of durations (seconds, or 90s, 5m, 2h, 1.5d);
    unreadable: bad usage naming the option."""
    from models.definitions.times import parse_duration
    try:
        return parse_duration(value)
    except ValueError as exc:
        raise UsageError(f"{opt}: {exc}") from exc


def _window(args, cmd: str):
    """--from/--to as naive UTC (either may be None), checked for order; bad usage otherwise."""
    from models.definitions.times import parse_window
    try:
        return parse_window(args.date_from, args.date_to)
    except ValueError as exc:
        raise UsageError(f"{cmd}: {exc}") from exc


def _none_of(cmd: str, args, flags: dict[str, str], because: str) -> None:
    """Bad usage when any option of ``flags`` (dest -> option) was given: it would do nothing ``because``."""
    given = [opt for dest, opt in flags.items() if getattr(args, dest) not in (None, False, [], "")]
    if given:
        raise UsageError(f"{cmd}: {' and '.join(given)} cannot be used {because}")


def emit(df, fmt: str | None, out: str | None) -> None:
    """Write a Polars DataFrame as an aligned text table, CSV, JSON or Parquet, to stdout or ``out``.

    The format defaults to the extension of ``out`` (.csv, .json, .parquet), else a text table. CSV is the
    finance exports' and the dashboards' downloads' (exports.csv_bytes: text cells neutralised, unknown numbers
    empty, times as YYYY-MM-DD HH:MM:SS UTC); on a terminal, control characters in data print escaped."""
    from dashboards import exports, terminal
    if fmt is None:
        ext = Path(out).suffix.lower() if out else ""
        fmt = {".csv": "csv", ".json": "json", ".parquet": "parquet"}.get(ext, "table")
    if fmt == "parquet":
        if not out:
            raise UsageError("--format parquet needs --out FILE")
        df.write_parquet(out)
        return
    if fmt == "csv":
        text = exports.csv_bytes(df).decode("utf-8")     # the one CSV of every file that leaves the product
    elif fmt == "json":
        # NaN and infinity are not JSON (a browser's JSON.parse refuses the file): they are null, as missing is
        text = json.dumps(exports.finite(df).to_dicts(), default=_json_value, indent=1) + "\n"   # escapes controls
    else:
        text = terminal.format_table(df, None if out else terminal.terminal_width(sys.stdout))
    if out:
        Path(out).write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(terminal.escape(text, multiline=True) if fmt == "csv" and sys.stdout.isatty() else text)


def _json_value(v):
    """Decimals (money, GPU-hours) as JSON numbers (exact up to 15 significant digits), the rest as text."""
    from decimal import Decimal
    return float(v) if isinstance(v, Decimal) else str(v)


def _print_ingest_summary(args, summary: dict) -> bool:
    """Print a run's counts and first rejects; True when the run is an error (it loaded nothing from data)."""
    reasons = ", ".join(f"{n} {r}" for r, n in sorted(summary.get("skip_reasons", {}).items()))
    stored = summary["inserted"] + summary["updated"] + summary["unchanged"]
    into = f" into {stored} {summary['stored_as']}" if stored != summary["loaded"] else ""
    _say(args, f"{summary['input']}: read {summary['read']} {summary.get('read_as', 'lines')}: "
               f"loaded {summary['loaded']}{into} "
               f"(new {summary['inserted']}, updated {summary['updated']}, unchanged {summary['unchanged']}), "
               f"skipped {summary['skipped']}" + (f" [{reasons}]" if reasons else "")
               + f", rejected {summary['rejected']} (run {summary['run_id']})")
    for line in summary.get("reject_examples", []):
        _err(line)
    for note in summary.get("notes", []):
        _say(args, f"  note: {note}")
    more = summary["rejected"] - len(summary.get("reject_examples", []))
    if more > 0:
        _say(args, f"  ... and {more} more rejected lines: see the `rejects` table (run {summary['run_id']})")
    if summary.get("error"):
        _err(f"gpuledger: {summary['error']}")
    return bool(summary.get("error"))


def _ingest_status(args, summaries: list[dict]) -> int:
    """Exit 1 when an input loaded nothing from data (its summary says why), or with --strict any reject."""
    bad = any(s.get("error") for s in summaries)
    bad = bad or getattr(args, "strict", False) and any(s["rejected"] for s in summaries)
    return EXIT_ERROR if bad else EXIT_OK


def _after_ingest(args, con) -> None:
    """Ingest keeps the marts and the serving snapshot current (``--no-refresh`` to batch several)."""
    if getattr(args, "no_refresh", False):
        return
    from models.pipeline import refresh
    if sys.stderr.isatty() and not getattr(args, "quiet", False):
        print("refreshing marts and the dashboard snapshot ...", file=sys.stderr, flush=True)
    refresh.run(con, _db_path(args))


# ---------------------------------------------------------------- ingest

def cmd_ingest_sacct(args) -> int:
    """Load sacct output files (or stdin), or run sacct itself from the watermark (--live)."""
    from ingest import sacct, sacct_live
    if args.live and args.files:
        raise UsageError("ingest sacct: give FILEs or --live, not both")
    if not args.live and not args.files:
        raise UsageError("ingest sacct: give one or more FILEs, '-' for stdin, or --live")
    if args.since and not args.live:
        raise UsageError("ingest sacct: --since only with --live")
    since = _time(args.since, "--since")      # sacct runs with TZ=UTC
    con = _open(args)
    opts = sacct.SacctOptions(cluster=args.cluster, tz=args.tz, fields=args.fields, delimiter=args.delimiter,
                              strict=args.strict)
    if args.live:
        live = sacct_live.ingest_live(con, opts, since=since and f"{since:%Y-%m-%dT%H:%M:%S}",
                                      sacct_cmd=args.sacct_cmd, sdiag_cmd=args.sdiag_cmd)
        summaries = live["runs"]
        for s in summaries:
            _print_ingest_summary(args, s)
        changes: dict = {}
        for s in summaries:
            for k, v in s.get("transitions", {}).items():
                changes[k] = changes.get(k, 0) + v
        if changes:
            _say(args, "  state changes since the last run: " + ", ".join(f"{k} {v}" for k, v in changes.items()))
        for note in live["live_notes"]:
            _say(args, f"  note: {note}")
    else:
        summaries = []
        for f in args.files:   # each file's summary as soon as it is loaded: a long list shows progress
            summaries.append(sacct.ingest_path(con, f, opts))
            _print_ingest_summary(args, summaries[-1])
    _after_ingest(args, con)
    return _ingest_status(args, summaries)


def cmd_ingest_nodes(args) -> int:
    from ingest import slurm_nodes
    as_of = _time(args.as_of, "--as-of")
    if args.fields and args.format == "scontrol":
        raise UsageError("--fields names sinfo columns; scontrol records name their own")
    fields = slurm_nodes.parse_sinfo_fields(args.fields) if args.fields else None
    con = _open(args)
    summaries = []
    for f in args.files:
        summaries.append(slurm_nodes.ingest_path(con, f, fmt=args.format, cluster=args.cluster,
                                                 as_of=as_of and as_of.isoformat(), retire_missing=args.retire_missing,
                                                 fields=fields))
        _print_ingest_summary(args, summaries[-1])
    _after_ingest(args, con)
    return _ingest_status(args, summaries)


def cmd_ingest_events(args) -> int:
    from ingest import slurm_events
    con = _open(args)
    summaries = []
    for f in args.files:
        summaries.append(slurm_events.ingest_path(con, f, cluster=args.cluster, tz=args.tz))
        _print_ingest_summary(args, summaries[-1])
    _after_ingest(args, con)
    return _ingest_status(args, summaries)


def cmd_ingest_squeue(args) -> int:
    """squeue snapshots: files (FILE@TIME or --captured-at; a `squeue --iterate` log carries its times) or run
    squeue itself (--live)."""
    from ingest import squeue
    if args.live == bool(args.files):
        raise UsageError("ingest squeue: give FILE@TIME ... (or FILE with --captured-at), or --live")
    at = _time(args.captured_at, "--captured-at", args.tz)
    inputs = []
    for f in args.files:
        path, sep, when = f.rpartition("@") if "@" in f else (f, "", "")
        # no time: the file must be a `squeue --iterate` log, else the loader asks when it was taken
        inputs.append((path if sep else f, _time(when, f"{f}: time after @", args.tz) if sep else at))
    con = _open(args)
    summaries = []
    if args.live:
        summaries.append(squeue.ingest_live(con, cluster=args.cluster, squeue_cmd=args.squeue_cmd))
        _print_ingest_summary(args, summaries[-1])
    for path, t in inputs:
        summaries.append(squeue.ingest_path(con, path, t, cluster=args.cluster, tz=args.tz))
        _print_ingest_summary(args, summaries[-1])
    _after_ingest(args, con)
    return _ingest_status(args, summaries)


def cmd_ingest_reservations(args) -> int:
    """Reservations: `scontrol show reservation` / `sacctmgr -P show reservation` files, or both run (--live)."""
    from ingest import reservations
    return _ingest_files_or_live(args, "reservations", reservations.ingest_live, reservations.ingest_path)


def cmd_ingest_job_gpus(args) -> int:
    """The GPUs each job holds: `scontrol -d show job` files, or run it (--live)."""
    from ingest import job_gpus
    return _ingest_files_or_live(args, "job-gpus", lambda con, cluster: [job_gpus.ingest_live(con, cluster)],
                                 job_gpus.ingest_path)


def _ingest_files_or_live(args, name: str, live, path) -> int:
    """Run ``live(con, cluster)`` (its run summaries) with --live, else ``path(con, file, cluster, tz)`` per FILE."""
    if args.live == bool(args.files):
        raise UsageError(f"ingest {name}: give FILEs ('-' for stdin) or --live")
    con = _open(args)
    summaries = live(con, args.cluster) if args.live else []
    for s in summaries:
        _print_ingest_summary(args, s)
    for f in args.files:
        summaries.append(path(con, f, cluster=args.cluster, tz=args.tz))
        _print_ingest_summary(args, summaries[-1])
    _after_ingest(args, con)
    return _ingest_status(args, summaries)


def _telemetry_options(args):
    from ingest import telemetry_store
    interval = getattr(args, "interval", None)
    return telemetry_store.TelemetryOptions(
        cluster=args.cluster, node=getattr(args, "node", None),
        interval_s=max(60, _duration(interval, "--interval")) if interval else 60, keep_raw_days=args.keep_raw_days)


def _ingest_telemetry(args, load) -> int:
    """Run ``load(con, opts)`` (a list of summaries), print them, refresh; input errors exit 1 in one line."""
    from ingest.errors import InputError
    opts = _telemetry_options(args)
    con = _open(args)
    summaries = []
    try:
        for s in load(con, opts):     # summaries print as each input is loaded
            summaries.append(s)
            _print_ingest_summary(args, s)
            if s.get("pruned_raw_rows"):
                _say(args, f"  pruned {s['pruned_raw_rows']} raw telemetry rows older than {args.keep_raw_days} "
                           "days (the 5-minute rollup keeps them)")
    except InputError as exc:
        raise CliError(str(exc)) from exc
    _after_ingest(args, con)
    return _ingest_status(args, summaries)


def cmd_ingest_prometheus(args) -> int:
    from ingest import prometheus
    start, end = _time(args.start, "--start", args.tz), _time(args.end, "--end", args.tz)
    step = _duration(args.step, "--step")

    aggregate = _aggregate_interval(args)

    def load(con, opts):
        q = prometheus.QueryOptions(
            url=args.url, start=start, end=end, step_s=step,
            match=args.match, timeout_s=args.timeout, retries=args.retries,
            progress=_progress(args, "prometheus: query windows"))
        if aggregate:
            from ingest import prometheus_pushdown
            return [prometheus_pushdown.ingest(con, q, opts, aggregate)]
        return [prometheus.ingest(con, q, opts)]
    return _ingest_telemetry(args, load)


def _aggregate_interval(args) -> int | None:
    """`ingest prometheus --aggregate [INTERVAL]`: seconds, or None for the raw pull."""
    if args.aggregate is None:
        return None
    from ingest import prometheus_pushdown
    from ingest.errors import InputError
    try:
        return prometheus_pushdown.parse_interval(args.aggregate)
    except InputError as exc:
        raise CliError(str(exc)) from exc


def cmd_ingest_dcgm(args) -> int:
    from ingest import dcgm
    _time(args.scrape_time, "--scrape-time", args.tz)     # checked here; read again per file with FILE@TIME
    return _ingest_telemetry(args, lambda con, opts: dcgm.ingest_paths(
        con, args.files, opts, fmt=args.format, scrape_time=args.scrape_time, tz=args.tz))


def cmd_ingest_nvidia_smi(args) -> int:
    from ingest import nvidia_smi
    return _ingest_telemetry(args, lambda con, opts: (
        nvidia_smi.ingest_path(con, f, opts, fields=args.fields, tz=args.tz) for f in args.files))


def cmd_ingest_trace(args) -> int:
    """Load a public trace (file or directory) into the canonical tables; one summary line per input file."""
    from ingest import traces
    from ingest.errors import InputError
    start = _time(args.start, "--start")
    con = _open(args)
    try:
        summaries = traces.ingest(con, args.kind, args.path, cluster=args.cluster, start=start, tz=args.tz,
                                  nodes=args.nodes)
    except InputError as exc:
        raise CliError(str(exc)) from exc
    for s in summaries:
        _print_ingest_summary(args, s)
    _after_ingest(args, con)
    return _ingest_status(args, summaries)


def cmd_ingest_governance(args) -> int:
    """Validate the governance TOML, then (unless --check) replace the governance state and re-map jobs."""
    from ingest import governance
    from ingest.errors import InputError
    from models.metrics import cost
    try:
        if args.check:
            gov = governance.parse(governance.read(args.file)[0], args.file)
            _say(args, f"{args.file}: valid: {len(gov.teams)} teams, {len(gov.team_map)} mappings, "
                       f"{len(gov.entitlements)} entitlements, {len(gov.rates)} rates")
            return EXIT_OK
        con = _open(args)
        s = governance.ingest_path(con, args.file)
    except (InputError, OSError) as exc:
        raise CliError(str(exc)) from exc
    _say(args, f"{args.file}: loaded {s['loaded']} records (run {s['run_id']}); jobs re-mapped: {s['updated']}")
    if not args.quiet:
        emit(cost.rate_card(con), args.format, None)
    _unmapped_note(args, cost.unmapped_accounts(con))
    _after_ingest(args, con)
    return EXIT_OK


def _unmapped_note(args, unmapped) -> None:
    if not unmapped.height:
        return
    _say(args, f"{unmapped.height} account/cluster pairs map to no team (charged on their own lines):")
    for r in unmapped.head(10).iter_rows(named=True):
        _say(args, f"  {r['cluster']}/{r['account']}: {r['jobs']} jobs, {r['users']} users")
    if unmapped.height > 10:
        _say(args, f"  ... and {unmapped.height - 10} more (`gpuledger report fairness` lists them too)")


# ---------------------------------------------------------------- marts and reports

def cmd_refresh(args) -> int:
    from models.pipeline import refresh
    con = _open(args)
    done = refresh.run(con, _db_path(args), full=args.full)
    for name, secs in done:
        _say(args, f"refreshed {name} in {secs:.2f} s")
    return EXIT_OK


def cmd_export_lake(args) -> int:
    """Write the warehouse to an open lake (Hive-partitioned Parquet and a manifest); only changed parts."""
    from models.pipeline import lake
    con = _open(args, read_only=True)
    try:
        s = lake.export(con, args.dir, full=args.full)
    except lake.LakeError as exc:
        raise CliError(f"export lake: {exc}") from exc
    m = lake.read_manifest(args.dir)
    _say(args, f"export lake: {s['written']} parts written ({s['rows_written']:,} rows, {s['bytes_written']:,} bytes), "
               f"{s['kept']} unchanged, {s['retired']} retired, in {s['seconds']:.1f} s; manifest version "
               f"{m['version']}, schema {m['schema_version']}")
    return EXIT_OK


def cmd_report_utilization(args) -> int:
    """Capacity, allocated, idle and unavailable GPU-hours per bucket and group."""
    from models.metrics import timeline, utilization
    lo, hi = _window(args, "report utilization")
    con = _open(args, read_only=True)
    try:
        df = utilization.by_bucket(con, lo, hi, args.bucket, args.by or "cluster")
    except ValueError as exc:
        raise UsageError(f"report utilization: {exc}") from exc
    if df.is_empty():
        if timeline.resolve_window(con) is None:
            _say(args, "report utilization: no accounting in the warehouse yet (run `gpuledger ingest sacct ...`)")
        else:
            _freshness(args, con)          # a window the accounting does not reach says so
        return EXIT_OK
    beyond = df.get_column("beyond_capacity_gpu_h").drop_nulls().sum()
    if beyond > 1e-9 and not df.get_column("capacity_gpu_h").drop_nulls().sum():
        _say(args, "note: no GPU capacity known (no node inventory): capacity_gpu_h, unavailable_gpu_h, "
                   "available_gpu_h and idle_gpu_h read 0 for want of data, and every allocated GPU-hour is "
                   f"beyond_capacity_gpu_h ({beyond:,.2f}); ingest `scontrol show node` snapshots to count capacity")
    elif beyond > 1e-9:
        _say(args, f"note: {beyond:,.2f} GPU-hours were held on nodes the inventory lacks or lists with fewer GPUs "
                   "(beyond_capacity_gpu_h); ingest `scontrol show node` snapshots to count their capacity")
    lost = timeline.unplaced(con, lo, hi)
    if lost["jobs"]:
        _say(args, f"note: {lost['jobs']:,} jobs held {lost['gpu_h']:,.2f} GPU-hours in the window by their records "
                   "but name no node (a trace without placement, e.g. openb's pod lists): "
                   "allocated_gpu_h and allocation_ratio leave them out and idle_gpu_h counts their GPUs as idle")
    emit(df, args.format, args.out)
    _freshness(args, con)
    return EXIT_OK


def _fragmentation_checks(args) -> None:
    cmd = "report fragmentation"
    if args.view != "summary":
        _none_of(cmd, args, {"bucket": "--bucket", "popularity": "--popularity"},
                 f"with --view {args.view} (they shape the summary)")
    if args.view == "jobs":
        _none_of(cmd, args, {"by": "--by"}, "with --view jobs (one row per pending job)")


def cmd_report_fragmentation(args) -> int:
    """Free GPUs that pending jobs could not use: per bucket and cell, per group, or per pending job."""
    from models.metrics import blocked, fragmentation, timeline
    _fragmentation_checks(args)
    lo, hi = _window(args, "report fragmentation")
    con = _open(args, read_only=True)
    try:
        if args.view == "summary":
            df = fragmentation.report(con, lo, hi, args.bucket or "day", args.by or "gpu_type,partition",
                                      args.interval, 1.0 if args.popularity is None else args.popularity)
        elif args.view == "blocked":
            df = blocked.blocked(con, lo, hi, args.by or "team,size_class", args.interval)
        else:
            df = blocked.per_job(con, lo, hi, args.interval)
    except ValueError as exc:
        raise UsageError(f"report fragmentation: {exc}") from exc
    if df.is_empty():
        _say(args, "report fragmentation: nothing to report in this window (no accounting, or no pending jobs)")
        _freshness(args, con)
        return EXIT_OK
    lost = timeline.unplaced(con, lo, hi)
    if lost["jobs"]:
        _say(args, f"note: {lost['jobs']:,} jobs held {lost['gpu_h']:,.2f} GPU-hours in the window by their records "
                   "but name no node (a trace without placement, e.g. openb's pod lists): the free GPUs here count "
                   "theirs as free, so free GPUs, whole free nodes and fragmentation overstate")
    emit(df, args.format, args.out)
    if args.view == "summary" and not getattr(args, "quiet", False):
        rate = fragmentation.window_rate(con, lo, hi, interval=args.interval,   # per pool, as the dashboard
                                         popularity=1.0 if args.popularity is None else args.popularity)
        _say(args, "fragmentation rate of the window (FGD, each day's samples against that day's requests): "
                   + ("-" if rate is None else f"{100 * rate:.1f} %"))
    _freshness(args, con)
    return EXIT_OK


def _efficiency_checks(args, by: list[str]) -> None:
    cmd = "report efficiency"
    if args.worst:
        _none_of(cmd, args, {"by": "--by", "total": "--total", "bucket": "--bucket"},
                 "with --worst (it lists jobs)")
    elif "job" in by:
        _none_of(cmd, args, {"total": "--total", "bucket": "--bucket"}, "with --by job (one row per job)")
    elif args.total:
        _none_of(cmd, args, {"bucket": "--bucket"}, "with --total (no time buckets)")


def cmd_report_efficiency(args) -> int:
    """Efficiency per group and bucket, per job (--by job), or the worst offenders (--worst N)."""
    from models.metrics import efficiency
    by = _names(args.by)
    _efficiency_checks(args, by)
    lo, hi = _window(args, "report efficiency")
    con = _open(args, read_only=True)
    try:
        if not efficiency.has_jobs(con):
            _say(args, "report efficiency: no GPU jobs in the efficiency mart yet (ingest sacct and telemetry: "
                       "`gpuledger ingest sacct ...`, `gpuledger ingest prometheus|dcgm|nvidia-smi ...`)")
            return EXIT_OK
        if args.worst:
            df = efficiency.worst_offenders(con, lo, hi, args.worst)
        elif "job" in by:
            df = efficiency.per_job(con, lo, hi)
        else:
            df = efficiency.by_group(con, lo, hi, by, None if args.total else args.bucket or "day")
    except ValueError as exc:
        raise UsageError(f"report efficiency: {exc}") from exc
    emit(df, args.format, args.out)
    _efficiency_footer(args, con, efficiency.summary(con, lo, hi), lo, hi)
    return EXIT_OK


def _efficiency_footer(args, con, s: dict, lo, hi) -> None:
    """What the numbers rest on: window, metric, attribution methods, jobs without telemetry; stale marts."""
    w0, w1 = s["window"]
    if (lo and lo != w0) or (hi and hi != w1):
        _say(args, f"window widened to whole UTC hours, the efficiency mart's grain: {w0:%Y-%m-%d %H:%M} to "
                   f"{w1:%Y-%m-%d %H:%M}")
    tel = s["telemetry_gpu_h"] or 0.0
    pct = (lambda x: f"{100 * x / tel:.1f}%") if tel else (lambda x: "-")
    metrics = ", ".join(f"{name} {pct(s[k])}" for name, k in (("SM_ACTIVE", "sm_active_gpu_h"),
                        ("GR_ENGINE_ACTIVE", "gr_engine_active_gpu_h"), ("GPU_UTIL", "gpu_util_gpu_h")) if s[k])
    _say(args, f"activity metric: {metrics or 'none (no telemetry)'} of {tel:,.2f} telemetry GPU-h; "
               f"attribution: exact by exporter label {pct(s['exporter_label_gpu_h'])}, exact by GPU index "
               f"{pct(s['gpu_index_gpu_h'])}, node share {pct(s['node_share_gpu_h'])}"
               + (" (exact needs the jobs' GPU indices: `ingest job-gpus --live`, or dcgm-exporter's HPC job mapping)"
                  if tel and not s['exporter_label_gpu_h'] and not s['gpu_index_gpu_h'] else ""))
    _say(args, f"{s['jobs_without_telemetry']} of {s['jobs']} GPU jobs had no telemetry "
               f"({s['gpu_h_without_telemetry']:,.2f} of {s['alloc_gpu_h']:,.2f} allocated GPU-h): shown as "
               "'no telemetry', not as idle")
    _freshness(args, con)


def _window_or_windows(args) -> tuple:
    """--from/--to (one window) or --windows (several), read and checked before the warehouse is opened."""
    lo, hi = _time(args.date_from, "--from"), _time(args.date_to, "--to")
    if lo or hi:
        _none_of(f"report {args.report}", args, {"windows": "--windows"}, "with --from/--to (one window)")
    return lo, hi


def _governance_windows(args, con, default_days, lo, hi):
    """--from/--to as one window, else --windows (default: the governance's, 7 and 30 days) ending at the horizon."""
    from models.definitions.times import check_window
    from models.metrics import fairness, timeline
    if lo or hi:
        hi = hi or timeline.horizon(con)
        if lo is None or hi is None:
            raise UsageError(f"report {args.report}: give --from with --to (a window needs its start)" if lo is None
                             else f"report {args.report}: no accounting loaded: --from has no data horizon to end at")
        try:
            check_window(lo, hi)           # the message every report gives for a window that ends before it starts
        except ValueError as exc:
            raise UsageError(f"report {args.report}: {exc}") from exc
        return [(f"{lo:%Y-%m-%d}..{hi:%Y-%m-%d}", lo, hi)]
    try:
        days = [int(d) for d in args.windows.split(",")] if args.windows else list(default_days)
    except ValueError:
        raise UsageError(f"--windows {args.windows!r}: give whole days, e.g. 7,30") from None
    return fairness.default_windows(con, days)


def _print_views(args, views: dict, default: str, compact: dict | None = None) -> None:
    """One view to --out/--format, or every view as text tables (compact columns where given)."""
    if args.view or args.out or args.format in ("csv", "json", "parquet"):
        emit(views[args.view or default], args.format, args.out)
        return
    for name, df in views.items():
        sys.stdout.write(f"\n== {name}\n")
        cols = [c for c in (compact or {}).get(name, df.columns) if c in df.columns]
        emit(df.select(cols), "table", None)


FAIRNESS_TEAM_COLUMNS = ["window", "cluster", "pool", "team", "usage_gpu_h", "usage_share", "entitlement_share",
                         "share_ratio", "fairshare_classic", "level_fs", "pending_gpu_h", "gap_gpu_h", "gap"]


def cmd_report_fairness(args) -> int:
    """Usage against entitlement per team and pool, Slurm fair-share factors, Jain and Gini, entitlement gap."""
    from models.definitions.policy import CostError, current_policy
    from models.metrics import cost, fairness
    if args.view != "sshare":
        _none_of("report fairness", args, {"as_of": "--as-of", "basis": "--basis"}, "without --view sshare")
    as_of, (lo, hi) = _time(args.as_of, "--as-of"), _window_or_windows(args)
    con = _open(args, read_only=True)
    try:
        policy = current_policy(con)
        windows = _governance_windows(args, con, policy.windows_days, lo, hi)
        if not windows:
            raise CliError("report fairness: no jobs in the warehouse yet (run `gpuledger ingest sacct ...`)")
        rep = fairness.report(con, windows, policy, half_life_days=args.half_life, pool=args.pool)
        views = {"pools": rep["pools"], "teams": rep["teams"]}
        if args.view == "sshare":
            views["sshare"] = fairness.sshare(con, as_of, args.half_life, args.basis or "billing", policy)
    except (CostError, ValueError) as exc:
        raise CliError(str(exc)) from exc
    _print_views(args, views, "teams", {"teams": FAIRNESS_TEAM_COLUMNS})
    unmapped = cost.unmapped_accounts(con)
    if unmapped.height:
        _say(args, f"{unmapped.height} accounts map to no team; their jobs count as '(unmapped)': "
                   + ", ".join(f"{r['cluster']}/{r['account']}" for r in unmapped.head(8).iter_rows(named=True)))
    _freshness(args, con)
    return EXIT_OK


def _queue_by(args) -> tuple[str, ...]:
    from models.metrics import queue
    if args.view not in (None, "waits"):
        _none_of("report queue", args, {"by": "--by"}, f"with --view {args.view} (it groups the waits view)")
    by = tuple(_names(args.by)) or ("team", "size_class")
    bad = [c for c in by if c not in queue.GROUPS]
    if bad:
        raise UsageError(f"report queue: cannot group by {', '.join(bad)}; choose from {', '.join(queue.GROUPS)}")
    return by


def cmd_report_queue(args) -> int:
    """Queue waits per team x size class and per QOS, bounded slowdown, starvation, jobs pending now."""
    import polars as pl
    from models.definitions.policy import CostError, current_policy
    from models.metrics import queue
    by, (lo, hi) = _queue_by(args), _window_or_windows(args)
    con = _open(args, read_only=True)
    try:
        policy = current_policy(con)
    except CostError:
        policy = None   # waits need no governance; teams then show as (unmapped)
    thr = args.threshold_hours or (policy.starvation_hours if policy else 24.0)
    tau = args.tau_minutes or (policy.bsld_tau_minutes if policy else 10.0)
    windows = _governance_windows(args, con, policy.windows_days if policy else (7, 30), lo, hi)
    if not windows:
        raise CliError("report queue: no jobs in the warehouse yet (run `gpuledger ingest sacct ...`)")

    def per_window(f):
        return pl.concat([f(s, e).select(pl.lit(w).alias("window"), pl.all()) for w, s, e in windows])
    views = {
        "waits": per_window(lambda s, e: queue.waits(con, s, e, by, tau, thr)),
        "qos": per_window(lambda s, e: queue.waits(con, s, e, ("qos",), tau, thr)),
        "starvation": per_window(lambda s, e: queue.starvation(con, s, e, thr)),
        "pending": queue.pending_at(con, windows[0][2]),
    }
    _print_views(args, views, "waits")
    _freshness(args, con)
    return EXIT_OK


# ---------------------------------------------------------------- losses and reliability (issue 16)

def cmd_report_losses(args) -> int:
    """Lost GPU-hours by cause per team/pool/node and bucket, with goodput; or the jobs that lost work."""
    from models.metrics import losses
    lo, hi = _window(args, "report losses")
    if args.view == "jobs":
        _none_of("report losses", args, {"by": "--by", "bucket": "--bucket", "total": "--total"},
                 "with --view jobs (one row per job)")
    elif args.cause or args.limit:
        raise UsageError("report losses: --cause and --limit go with --view jobs")
    con = _open(args, read_only=True)
    if not losses.has_marts(con):
        raise CliError("report losses: the loss marts are not built yet (run `gpuledger refresh`)")
    try:
        if args.view == "jobs":
            df = losses.jobs(con, lo, hi, args.cause, args.limit)
        else:
            df = losses.report(con, lo, hi, None if args.total else args.bucket or "month", args.by or "team")
    except ValueError as exc:
        raise UsageError(f"report losses: {exc}") from exc
    b = losses.basis(con, lo, hi)
    if df.is_empty():
        _say(args, "report losses: nothing to report in this window ("
                   + ("only jobs without node placement lost work, see below" if b.get("unplaced_jobs")
                      else "no accounting, or no job lost work") + ")")
    else:
        emit(df, args.format, args.out)
    if "window" in b:
        w0, w1 = b["window"]
        _say(args, f"window: whole UTC days {w0:%Y-%m-%d} to {w1:%Y-%m-%d} (the loss marts' grain); lost = GPUs x "
                   f"time since the last checkpoint for {b['checkpoint_gpu_h']:,.2f} GPU-h (governance "
                   f"[[checkpoints]]), since the job's start for {b['since_start_gpu_h']:,.2f} GPU-h")
        if b["unplaced_jobs"]:
            _say(args, f"{b['unplaced_jobs']} jobs that lost work have no node placement (no timeline pieces): "
                       "listed with --view jobs, 0 GPU-h counted")
        if b["unknown"]:
            _say(args, "not known, read as 0: " + "; ".join(f"{c}_gpu_h, {why}" for c, why in b["unknown"].items()))
    _freshness(args, con)
    return EXIT_OK


def cmd_report_preemption(args) -> int:
    """Preempted GPU-hours per victim team and per preemptor QOS/partition/team, requeues, work lost."""
    import polars as pl
    from models.metrics import preemption
    lo, hi = _window(args, "report preemption")
    con = _open(args, read_only=True)
    views = preemption.views(con, lo, hi, args.grace)
    if views["jobs"].is_empty() and views["victims"].is_empty():
        _say(args, "report preemption: no preempted or requeued jobs in the window")
    _print_views(args, views, "victims")
    v = views["jobs"]
    if v.height:
        ck = v.filter(pl.col("basis") == "checkpoint")["work_lost_gpu_h"].sum()
        _say(args, f"note: work lost = GPUs x time since the last checkpoint for {ck:,.2f} GPU-h (governance "
                   f"[[checkpoints]]), since the run's start for {v['work_lost_gpu_h'].sum() - ck:,.2f} GPU-h")
    _freshness(args, con)
    return EXIT_OK


RELIABILITY_VIEWS = ("nodes", "pools", "outages", "offenders", "gpus", "slow-nodes", "slow-jobs", "teams", "pull")


def cmd_report_reliability(args) -> int:
    """Node reliability (outages, MTBF/MTTR, repeat offenders, GPUs with XIDs) and slow nodes; the manager's
    summary (--view teams|pull, by default over the last full month)."""
    from models.metrics import losses, reliability
    lo, hi = _window(args, "report reliability")
    if args.view != "offenders":
        _none_of("report reliability", args, {"fdr": "--fdr"}, f"with --view {args.view}")
    con = _open(args, read_only=True)
    if not losses.has_marts(con):
        raise CliError("report reliability: the loss marts are not built yet (run `gpuledger refresh`)")
    if args.view in ("teams", "pull"):
        return _reliability_summary(args, con, lo, hi)
    views = {"nodes": lambda: reliability.nodes(con, lo, hi, "node"),
             "pools": lambda: reliability.nodes(con, lo, hi, "gpu_type"),
             "outages": lambda: reliability.outages(con, lo, hi),
             "offenders": lambda: reliability.offenders(con, lo, hi, args.fdr or reliability.FDR),
             "gpus": lambda: reliability.gpus(con, lo, hi),
             "slow-nodes": lambda: reliability.slow_nodes(con, lo, hi),
             "slow-jobs": lambda: reliability.slow_node_jobs(con, lo, hi)}
    if args.view in ("gpus", "slow-nodes", "slow-jobs") and not reliability.has_telemetry(con):
        _say(args, f"report reliability: no GPU telemetry in the warehouse, so --view {args.view} has nothing to "
                   "show (ingest DCGM or nvidia-smi telemetry: XIDs and per-node activity come from it)")
        return EXIT_OK
    df = views[args.view]()
    if df.is_empty():
        _say(args, f"report reliability: nothing to report for --view {args.view} in this window")
    else:
        emit(df, args.format, args.out)
    until = reliability.observed_until(con, lo, hi) if args.view in ("nodes", "pools", "outages") else {}
    if until and not df.is_empty():
        _say(args, "note: node-hours and open outages stop at the last time anything of the cluster is known, "
                   "before the window's end: " + ", ".join(f"{c} {t:%Y-%m-%d %H:%M} UTC" for c, t in until.items()))
    if args.view == "offenders" and not df.is_empty():
        _say(args, f"offenders: one-sided binomial test of each node's failed jobs (NODE_FAIL, BOOT_FAIL, FAILED) "
                   f"against its pool's rate, Benjamini-Hochberg q <= {args.fdr or reliability.FDR} per pool; "
                   f"{int(df['flagged'].sum())} of {df.height} nodes flagged")
    _freshness(args, con)
    return EXIT_OK


def _reliability_summary(args, con, lo, hi) -> int:
    """--view teams|pull: the top of the Reliability page (models/metrics/reliability_summary.py); without
    --from/--to the last full UTC month before the data's horizon."""
    from models.metrics import losses, reliability, reliability_summary as rs
    if lo is None and hi is None:
        month = rs.last_full_month(con)
        if month is None:
            _say(args, "report reliability: no timeline yet (run `gpuledger refresh`)")
            return EXIT_OK
        lo, hi = month
        _say(args, f"window: the last full UTC month, {lo:%Y-%m} ({lo:%Y-%m-%d} to {hi:%Y-%m-%d}); "
                   "--from/--to for another")
    df = rs.teams(con, lo, hi) if args.view == "teams" else rs.pull(con, lo, hi)
    if df.is_empty():
        _say(args, f"report reliability: nothing to report for --view {args.view} in this window"
                   + (" (no node is a repeat offender, slow, or carries a GPU with hardware XIDs)"
                      if args.view == "pull" else ""))
    else:
        emit(df, args.format, args.out)
    if not reliability.has_telemetry(con):
        _say(args, "no GPU telemetry in the warehouse: slow nodes (held back GPU-hours) and XID GPUs cannot be "
                   "measured (ingest DCGM or nvidia-smi telemetry)")
    outage = losses.unknown_causes(con).get("outage") if args.view == "teams" else None
    if outage:
        _say(args, f"outage_gpu_h not known, read as 0: {outage}")
    _freshness(args, con)
    return EXIT_OK


def cmd_report_reservations(args) -> int:
    """Reserved vs used GPU-hours per reservation, the reserved idle, and the owner who pays for it."""
    from models.metrics import reservations
    lo, hi = _window(args, "report reservations")
    con = _open(args, read_only=True)
    df = reservations.report(con, lo, hi)
    if df.is_empty():
        _say(args, "report reservations: no reservations in the window (run `gpuledger ingest reservations ...`)")
        return EXIT_OK
    emit(df, args.format, args.out)
    _freshness(args, con, window=False)        # reservations are known ahead of the accounting
    return EXIT_OK


def cmd_report_pending(args) -> int:
    """Waiting GPU-hours per group and Slurm pending reason (squeue snapshots, else sacct's last reason)."""
    from models.metrics import pending
    lo, hi = _window(args, "report pending")
    gap = _duration(args.max_gap, "--max-gap")
    con = _open(args, read_only=True)
    try:
        views = pending.views(con, lo, hi, args.by or "team", gap)
    except ValueError as exc:
        raise UsageError(f"report pending: {exc}") from exc
    cov = pending.coverage(con)
    if not cov["snapshots"]:
        _say(args, "note: no squeue snapshots in the warehouse (`gpuledger ingest squeue`): reasons come from sacct's "
                   "Reason column where the export had it (Slurm keeps only a job's last reason), else 'unknown'")
    else:
        _say(args, f"note: {cov['snapshots']:,} squeue snapshots from {cov['first']:%Y-%m-%d %H:%M:%S} to "
                   f"{cov['last']:%Y-%m-%d %H:%M:%S} UTC; a wait outside them takes sacct's last reason, "
                   "else 'unknown'")
    if views["classes"].is_empty():
        _say(args, "report pending: no GPU job waited in the window")
        _freshness(args, con)
        return EXIT_OK
    _print_views(args, views, "classes")
    _freshness(args, con)
    return EXIT_OK


# ---------------------------------------------------------------- scheduled reports, on demand (issue 19 part 4)

def _report_snapshot(args):
    """The serving snapshot of the warehouse (reports read what the dashboard reads) and its version."""
    from dashboards import reports  # noqa: F401 -- first: it quiets Streamlit's warnings outside a server
    from dashboards import queries
    _open(args, read_only=True).close()                   # names a missing warehouse as every read does
    os.environ["GPULEDGER_DB"] = str(_db_path(args))     # dashboards' reads follow $GPULEDGER_DB
    version = queries.current().version
    if not version:
        raise CliError(f"{_db_path(args)}: no dashboard snapshot published yet (run `gpuledger refresh`)")
    return version


def _report_week(args, version: str):
    """--week's window, else the last complete ISO week before the snapshot's data horizon."""
    from dashboards import reports, queries
    cat = queries.catalogue(version)
    if cat.horizon is None:
        raise CliError("report: the warehouse has no jobs yet")
    if not args.week:
        return reports.last_complete_week(cat.horizon)
    try:
        f = reports.week_window(args.week)
    except ValueError as exc:
        raise UsageError(f"report: --week: not an ISO week such as 2026-W42: {args.week!r}") from exc
    # a week the accounting does not reach would be a report of dashes, its cost 0.00
    if f.t0 >= cat.horizon or f.end <= cat.first_day:
        raise CliError(f"report: --week {args.week} ({f.start} to {f.end - dt.timedelta(days=1)}) is outside the "
                       f"data ({cat.first_day} to {cat.horizon:%Y-%m-%d %H:%M} UTC): nothing to report")
    return f


def _write_report(args, r) -> int:
    """The report's text on stdout; with --out, its HTML (and --pdf's PDF, and attachments) in that directory."""
    from dashboards import pdf, reports
    if args.pdf:
        try:
            r = reports.with_pdf(r)
        except pdf.PdfError as exc:
            raise CliError(f"report: {exc}") from exc
        if not args.out:
            raise UsageError("report: --pdf writes a file: give --out DIR")
    if not args.out:
        sys.stdout.write(r.text)
        return EXIT_OK
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    html = out / f"{r.kind.replace('_', '-')}-{r.period}.html"
    html.write_text(r.html, encoding="utf-8")
    written = [html]
    for name, data, _ in r.attachments:
        (out / name).write_bytes(data)
        written.append(out / name)
    _say(args, f"{r.subject}: wrote {', '.join(str(p) for p in written)}")
    return EXIT_OK


def cmd_report_weekly(args) -> int:
    """The weekly manager report: the Overview's figures and charts for one ISO week (the dashboard's reads)."""
    from dashboards import reports, access
    version = _report_snapshot(args)
    f = _report_week(args, version)
    if args.as_user:
        try:
            version = access.scoped_version(version, reports.recipient_scope(version, args.as_user))
        except reports.NotAllowed as exc:
            raise CliError(f"report weekly: {exc}") from exc
    return _write_report(args, reports.weekly(version, f))


def cmd_report_team_note(args) -> int:
    """A team lead's weekly note: the team's usage, waits and waste, as its lead sees the dashboard."""
    from dashboards import reports, queries
    version = _report_snapshot(args)
    if args.team not in queries.catalogue(version).all_teams:
        raise CliError(f"report team-note: no team {args.team!r} in the governance file or the jobs")
    return _write_report(args, reports.team_note(version, _report_week(args, version), args.team))


def cmd_report_finance_pack(args) -> int:
    """The finance pack of a closed month: statement workbook, reconciliation and adjustments."""
    from dashboards import reports, model_reads  # reports first: it quiets Streamlit outside a server
    version = _report_snapshot(args)
    closed = model_reads.chargeback_periods(version, None, None)[1]
    period = args.period or (max(closed) if closed else None)
    if period is None:
        raise CliError("report finance-pack: no period is closed yet (`gpuledger chargeback --period P --close`)")
    try:
        r = reports.finance_pack(version, period)
    except ValueError as exc:
        raise CliError(f"report {exc}") from exc
    args.pdf = False
    return _write_report(args, r)


def _scheduled_report_parsers(isrep) -> None:
    """`report weekly|team-note|finance-pack`: what `serve`'s [[reports]] send, on demand."""
    for name, func, text in (("weekly", cmd_report_weekly, "the weekly manager report (the Overview's figures and "
                                                           "charts) as text, or HTML and PDF files"),
                             ("team-note", cmd_report_team_note, "a team lead's weekly note: the team's usage, "
                                                                 "waits and waste")):
        s = _command(isrep, name, func, text)
        if name == "team-note":
            s.add_argument("--team", required=True, metavar="TEAM", help="the team")
        else:
            s.add_argument("--as", dest="as_user", metavar="EMAIL",
                           help="in this person's dashboard scope (their governance [[access]] role)")
        s.add_argument("--week", metavar="YYYY-Www", help="ISO week, e.g. 2026-W42 (default: the last complete "
                                                          "week before the data horizon)")
        s.add_argument("--out", metavar="DIR", help="write the HTML (and attachments) into DIR instead of "
                                                   "printing the text")
        s.add_argument("--pdf", action="store_true", help="also print the HTML to PDF (headless chromium)")
    s = _command(isrep, "finance-pack", cmd_report_finance_pack,
                 "the finance pack of a closed month: statement XLSX, reconciliation and adjustments")
    s.add_argument("--period", metavar="YYYY-MM", help="a closed month (default: the newest closed)")
    s.add_argument("--out", metavar="DIR", help="write the HTML, XLSX and CSVs into DIR instead of printing the text")
# ---------------------------------------------------------------- budgets (issue 19)

def cmd_report_budgets(args) -> int:
    """Each budget's period: charged so far + the demand forecast for the rest, against the budget."""
    from models.definitions.policy import CostError
    from models.forecasting import budgets
    con = _open(args, read_only=True)
    try:
        df = budgets.report(con, args.period)
    except (CostError, ValueError) as exc:
        raise CliError(f"report budgets: {exc}") from exc
    if df.is_empty():
        _say(args, "report budgets: no budget in force for the period (add [[budgets]] to the governance file "
                   "and run `gpuledger ingest governance FILE.toml`)")
        return EXIT_OK
    emit(df, args.format, args.out)
    over = df.filter(df["forecast_pct"] > 100)
    _say(args, f"{over.height} of {df.height} budgets forecast over 100 % (data horizon "
               f"{df['horizon'][0]:%Y-%m-%d %H:%M} UTC)")
    _freshness(args, con)
    return EXIT_OK


def cmd_report_alerts(args) -> int:
    """The alerts `gpuledger serve` raised (one row per episode) or its deliveries: who was told what, when."""
    from models.metrics import alerts
    lo, hi = _window(args, "report alerts")
    con = _open(args, read_only=True)
    df = (alerts.deliveries if args.view == "deliveries" else alerts.history)(con, lo, hi)
    if df.is_empty():
        _say(args, "report alerts: nothing in the window (alerts come from [[alerts]] rules of `gpuledger serve`)")
        return EXIT_OK
    emit(df, args.format, args.out)
    return EXIT_OK


def _budgets_parser(isrep) -> None:
    s = _command(isrep, "budgets", cmd_report_budgets, "budgets against charged-so-far + forecast spend",
                 "For each [[budgets]] entry of the governance file (per team or cost centre, per month or quarter, "
                 "in money or GPU-hours): what the period's statements charge so far, the daily demand forecast "
                 "(served GPU-hours) for the rest of the period priced at the scope's effective rate, their sum and "
                 "its percentage of the budget.")
    s.add_argument("--period", metavar="YYYY-MM|YYYY-QN",
                   help="a month (its month budgets and its quarter's quarter budgets) or a quarter; default: the "
                        "period holding the data horizon")
    _output_options(s)
    s = _command(isrep, "alerts", cmd_report_alerts, "alerts raised by the service and whom it told",
                 "The alerts of the service's [[alerts]] rules: one row per condition episode (fired, resolved, "
                 "values, the recipients told of each, deliveries still failing), or with --view deliveries every "
                 "delivery attempt. The window selects episodes overlapping it, or deliveries inside it.")
    _window_options(s)
    s.add_argument("--view", choices=["alerts", "deliveries"], default="alerts",
                   help="alerts (default): one row per episode; deliveries: one row per delivery attempt")
    _output_options(s)


# ---------------------------------------------------------------- finance

def cmd_chargeback(args) -> int:
    """Compute (or, for a closed period, re-read) the month's statement; export it; --close freezes it."""
    from models.definitions.policy import CostError
    from models.definitions.times import period_bounds
    from models.metrics import chargeback, freshness
    if args.out or args.format in ("xlsx", "parquet"):
        _none_of("chargeback", args, {"view": "--view"}, "with an export (it holds every view)")
    if args.out and args.format in ("table", "json"):
        raise UsageError(f"chargeback: --out writes csv, xlsx or parquet, not --format {args.format}")
    con = _open(args, read_only=not args.close)
    try:
        st = _close_period(args, con) if args.close else chargeback.statement(con, args.period)
    except (CostError, ValueError) as exc:
        raise CliError(str(exc)) from exc
    if not args.close:
        _freshness(args, con)
    if dict(st.header).get("Accounting covered (UTC)") == chargeback.NO_ACCOUNTING:   # a month of zeros, said why
        note = freshness.window_note(con, *period_bounds(st.period, st.policy.period_timezone),
                                     what=f"the period {st.period}")
        if note:
            _say(args, note)
    _say(args, _reconciliation_line(st))
    views = chargeback.views(st)
    if args.out or args.format in ("xlsx", "parquet"):
        return _export_statement(args, st, views, chargeback.units(st))
    if args.view:
        emit(views[args.view], args.format, None)
    elif args.format in ("csv", "json"):
        emit(views["by team"], args.format, None)
    else:
        for name in ("summary", "by team", "reconciliation", "adjustments"):
            if name != "adjustments" or views[name].height:
                sys.stdout.write(f"\n== {name}\n")
                emit(views[name], "table", None)
    return EXIT_OK


def _close_period(args, con):
    """Freeze the period (a no-op for a closed one); close refreshes, so the open statements and the snapshot
    know it."""
    from models.metrics import chargeback
    from models.pipeline import close
    if args.period in chargeback.closed_periods(con):
        _say(args, f"{args.period} is already closed; nothing changed (showing the frozen statement)")
        return chargeback.statement(con, args.period)
    st = close.close_period(con, args.period, db_path=_db_path(args))   # freezes, refreshes, republishes
    _say(args, f"closed {args.period} at {st.closed_at:%Y-%m-%d %H:%M:%S} UTC, sha256 {st.content_hash}")
    return st


def _reconciliation_line(st) -> str:
    from models.metrics.chargeback import reconciliation_sentence
    return f"{st.period} ({st.status}): " + reconciliation_sentence(st.total_row, st.policy.minor_units,
                                                                     st.policy.currency)


def _export_statement(args, st, views, units: dict) -> int:
    from dashboards import exports
    from ingest.warehouse import utcnow
    fmt = args.format if args.format in exports.FORMATS else None
    out = Path(args.out or ".")
    if out.is_dir() or (args.out or "").endswith("/"):
        out.mkdir(parents=True, exist_ok=True)
        out = out / f"chargeback-{st.period}.{fmt or 'xlsx'}"
    try:
        written = exports.write_tables(views, out, fmt, main="by team", title=f"GPU chargeback {st.period}",
                                       created=st.closed_at or utcnow(), units=units)
    except (ValueError, OSError) as exc:
        raise CliError(str(exc)) from exc
    _say(args, f"wrote {written[0]}" + (f" and {len(written) - 1} more files beside it ({written[0].stem}.*)"
                                        if len(written) > 1 else ""))
    return EXIT_OK


# ---------------------------------------------------------------- forecasts

def _forecast_run(args, progress) -> dict:
    """The forecast of a --series CSV or of the warehouse's demand (read-only)."""
    from ingest import series_csv
    from models.forecasting import capacity
    from models.metrics import demand
    caps = capacity.parse_capacity(args.capacity, bare=True)
    common = dict(capacity=caps, target_util=args.target_util, band=args.band, window=args.window,
                  shifts=not args.no_level_shifts, outliers=not args.keep_outliers, progress=progress)
    if args.series:
        _none_of("forecast", args, {"measure": "--measure", "cluster": "--cluster"},
                 "with --series (they choose a warehouse series)")
        by = _names(args.by)
        return capacity.forecast_csv(series_csv.read_series(args.series, by), args.series, by, args.freq,
                                     args.horizon, agg=args.agg or "mean", unit=args.unit or "gpus", **common)
    _none_of("forecast", args, {"unit": "--unit", "agg": "--agg"}, "without --series (they describe a CSV)")
    by, overrides = demand.parse_by(args.by or "pool"), common.pop("capacity")
    con = _open(args, read_only=True)
    res = capacity.forecast_warehouse(con, args.horizon, by=by, freq=args.freq or "day",
                                      measure=args.measure or "demanded", cluster=args.cluster,
                                      overrides=overrides, **common)
    _freshness(args, con)
    return res


def cmd_forecast(args) -> int:
    """Demand forecasts with calibrated intervals and, per pool, capacity exhaustion dates and GPUs needed."""
    from ingest.errors import InputError
    if args.horizon < 1:
        raise UsageError("forecast: --horizon must be at least 1 period")
    try:
        res = _forecast_run(args, _progress(args, "forecasting series"))
    except InputError as exc:
        raise CliError(str(exc)) from exc
    except ValueError as exc:
        raise UsageError(f"forecast: {exc}") from exc
    if res["forecast"].is_empty():
        if res["summary"].is_empty():
            _say(args, "forecast: no demand history to forecast (ingest accounting first, or pass --series FILE.csv)")
            return EXIT_OK
        if args.summary_out:
            emit(res["summary"], None, args.summary_out)
        # every series is idle: say which and since when, not "no history" (they have one)
        skipped = [f for f in (args.out, args.plot) if f]
        _say(args, "forecast: no series has demand to forecast: " + "; ".join(res["notes"])
             + (f" (nothing written to {', '.join(skipped)})" if skipped else ""))
        return EXIT_OK
    _forecast_files(args, res)
    if args.format in ("csv", "json"):
        emit(res["forecast"], args.format, None)
    elif not args.quiet or not args.out:
        _print_forecast_report(res)
    return EXIT_OK


def _forecast_files(args, res: dict) -> None:
    """--out (forecast rows), --summary-out (every model's backtest), --plot (HTML chart)."""
    if args.out:
        emit(res["forecast"], None, args.out)
        _say(args, f"forecast: {res['forecast'].height} rows written to {args.out}")
    if args.summary_out:
        emit(res["summary"], None, args.summary_out)
    if args.plot:
        from dashboards import forecast_charts
        figs = forecast_charts.forecast_figures(res["history"], res["forecast"], res["keys"], res["capacity"],
                                                per_hour=res.get("per_hour", 1.0), unit=res.get("unit", ""))
        forecast_charts.write_html(figs, args.plot, res["title"])
        _say(args, f"forecast: chart written to {args.plot}")


def _print_forecast_report(res: dict) -> None:
    import polars as pl
    from dashboards.terminal import format_table, terminal_width
    width = terminal_width(sys.stdout)
    keys = res["keys"]
    # A series without demand is not forecast: res["notes"] lists it, the table would show a model that made nothing
    summary = res["summary"].filter(~pl.col("model").is_in(["Zero", "none"]))
    _print(res["title"])
    cols = [*keys, "model", "history_periods", "backtest_horizon", "backtest_mase", "coverage80", "coverage95",
            "interval"]
    if summary.height:
        sys.stdout.write(format_table(summary.select(cols), width))
    for r in summary.filter(pl.col("notes") != "").iter_rows(named=True):
        _print(f"  note [{' / '.join(str(r[k]) for k in keys) or 'series'}]: {r['notes']}")
    for note in res.get("notes", []):
        _print(f"  note: {note}")
    cap = res.get("capacity")
    if cap is not None and cap.height:
        print("\nCapacity (GPUs; demand averaged over the smoothing window; dates = first day over target):")
        sys.stdout.write(format_table(cap, width))
    print("\nPoint forecasts and 80 %/95 % bounds per period: --out FILE (.csv, .json, .parquet) or --format csv")


# ---------------------------------------------------------------- simulation and planning

def _pool_counts(items: list[str], flag: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for it in items:
        pool, sep, n = it.partition("=")
        if not sep or not pool or not n.strip().lstrip("-").isdigit() or int(n) < 0:
            raise UsageError(f"{flag} {it!r}: expected POOL=N with N a whole number of nodes, e.g. h100=8")
        out[pool] = out.get(pool, 0) + int(n)
    return out


def _scenario(args):
    """The what-if of --add/--remove/--demand-scale/--runtime-scale/--policy/--placement/... (bad usage: exit 2)."""
    from models.simulation import whatif
    from models.simulation.simulate import Policy
    if args.demand_scale <= 0 or args.runtime_scale <= 0:
        raise UsageError("--demand-scale and --runtime-scale must be > 0")
    if args.replications < 1:
        raise UsageError("--replications must be >= 1")
    try:
        policy = Policy.parse(args.policy, placement=args.placement, bf_max_job_test=args.bf_max_job_test,
                              bf_interval_s=args.bf_interval, seed=args.seed)
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    return whatif.Scenario(add=_pool_counts(args.add, "--add"), remove=_pool_counts(args.remove, "--remove"),
                           demand_scale=args.demand_scale, runtime_scale=args.runtime_scale, policy=policy,
                           replay_events=not args.no_events, replay_reservations=not args.no_reservations)


def _sim_inputs(args, observed: bool = False):
    """The window's nodes, jobs and outages, from the warehouse opened read-only (then closed); with
    ``observed``, also the window's observed allocation ratio (%, None when unknown)."""
    from models.simulation import whatif
    lo, hi = _window(args, args.command)
    con = _open(args, read_only=True)
    try:
        inp = whatif.load_inputs(con, lo, hi, args.cluster)
        _freshness(args, con)
        return (inp, whatif.observed_allocation_ratio_pct(con, inp, args.cluster)) if observed else inp
    except ValueError as exc:
        raise CliError(str(exc)) from exc
    finally:
        con.close()


def _gpus(by_pool: dict) -> str:
    return ", ".join(f"{p} {g:,.0f}" for p, g in by_pool.items())


def _sim_window(inp) -> str:
    """The simulated window and what it holds besides its finished jobs."""
    n = inp.counts()
    extra = ([f"{n['queued_at_horizon']:,} still queued at the horizon"] if n["queued_at_horizon"] else []) + \
            ([f"{n['carried']:,} carried in, in the cluster at its start"] if n["carried"] else []) + \
            ([f"measured to the horizon {inp.horizon}"] if inp.horizon is not None else []) + \
            ([f"{n['reservations']:,} advance reservation(s), {n['in_reservations']:,} jobs in them"]
             if n["reservations"] else []) + \
            ([f"{n['reservation_not_loaded']:,} jobs ran in reservations not loaded (`gpuledger ingest reservations`): "
              "replayed as ordinary jobs"] if n["reservation_not_loaded"] else [])
    return f"{n['jobs']:,} jobs in [{inp.t0}, {inp.t1})" + (f" ({'; '.join(extra)})" if extra else "")


def _scenario_header(args, inp, cl) -> str:
    """What was simulated: the window, the scenario's inventory beside the observed one, the workload, the policy."""
    scen, seen = cl.gpus_by_pool(), inp.cluster.gpus_by_pool()
    changes = [f"+{n} {p}" for p, n in _pool_counts(args.add, "--add").items()]
    changes += [f"-{n} {p}" for p, n in _pool_counts(args.remove, "--remove").items()]
    return (f"simulate: {_sim_window(inp)}; scenario {cl.size} nodes "
            f"({', '.join(changes) or 'as observed'}), GPUs {_gpus(scen)}; baseline {inp.cluster.size} nodes, GPUs "
            f"{_gpus(seen)}; demand x{args.demand_scale:g}, run times x{args.runtime_scale:g}; "
            f"{'advance reservations ignored in the scenario; ' if args.no_reservations else ''}policy {args.policy} "
            f"({args.placement}); {args.replications} replications with the same seeds; waits in hours, 95% "
            "intervals; change = scenario - baseline")


def _validate_replay(args, sc) -> int:
    from models.simulation import whatif
    _none_of("simulate --validate", args,
             {"add": "--add", "remove": "--remove", "no_reservations": "--no-reservations"},
             "(it replays the observed capacity and reservations)")
    if args.demand_scale != 1 or args.runtime_scale != 1:
        raise UsageError("simulate --validate: --demand-scale and --runtime-scale cannot be used (it replays the "
                         "observed workload)")
    inp, seen = _sim_inputs(args, observed=True)
    try:
        res, out = whatif.replay(inp, sc.policy)
        _, summary = whatif.validate_replay(inp, sc.policy, (res, out))
    except ValueError as exc:
        raise CliError(str(exc)) from exc
    ratio = (f"; allocation ratio observed {seen:.1f} %, replayed {whatif.replay_utilization_pct(inp, res):.1f} %"
             if seen is not None else "")
    _say(args, f"replay of {_sim_window(inp)} on {inp.cluster.size} nodes, policy {args.policy} "
               f"({sc.policy.placement}){ratio}: waits in hours of the jobs whose wait was observed")
    emit(summary, args.format, args.out)
    return EXIT_OK


SIM_GROUPS = ("team", "size_class", "account", "pool", "partition")


def cmd_simulate(args) -> int:
    """What-if replay beside the baseline: p50/p95 wait (overall, per team, per size class), utilization,
    fragmentation, each with its 95% interval, and the change."""
    from models.simulation import whatif
    sc = _scenario(args)
    if args.validate:
        return _validate_replay(args, sc)
    by = tuple(_names(args.by))
    bad = [c for c in by if c not in SIM_GROUPS]
    if bad:
        raise UsageError(f"--by {','.join(bad)}: use {', '.join(SIM_GROUPS)}")
    inp = _sim_inputs(args)
    try:
        _say(args, _scenario_header(args, inp, whatif.scenario_cluster(inp, sc)))
        res = whatif.compare(inp, sc, args.replications, args.seed, by)
    except ValueError as exc:
        raise CliError(str(exc)) from exc
    emit(res, args.format, args.out)
    return EXIT_OK


def cmd_simulate_placement(args) -> int:
    """The FGD paper's placement protocol on an Alibaba openb trace."""
    from models.simulation import placement
    policies = placement.POLICIES if args.policy.lower() == "all" else _names(args.policy)
    for p in policies:
        if p not in placement.POLICIES:
            raise UsageError(f"--policy {p!r}: use one of {', '.join(placement.POLICIES)} or all")
    if args.seeds < 1:
        raise UsageError("--seeds must be >= 1")
    try:
        nodes, pods = placement.load_trace(args.trace, args.nodes)
    except placement.TraceError as exc:
        raise CliError(str(exc)) from exc
    curves = placement.run_protocol(nodes, pods, policies, list(range(args.first_seed, args.first_seed + args.seeds)),
                                    popularity=args.popularity, tie_break=args.tie_break)
    if args.out:
        emit(curves, None, args.out)
        _say(args, f"wrote {curves.height} rows to {args.out}")
    if args.plot:
        from dashboards import placement_charts
        placement_charts.write_placement_html({Path(args.trace).stem: curves}, args.plot)
        _say(args, f"wrote {args.plot}")
    emit(placement.summary_at(curves, 130), args.format if not args.out else None, None)
    return EXIT_OK


def _target_hours(text: str) -> float:
    return _duration(text, "--target-p95-wait") / 3600


def _grid(text: str | None) -> list[int] | None:
    try:
        return sorted({int(x) for x in _names(text)}) or None
    except ValueError:
        raise UsageError(f"--grid {text!r}: expected comma-separated node counts, e.g. 8,12,16") from None


def cmd_plan(args) -> int:
    """Smallest node count of a pool whose jobs' p95 wait meets the target (grid sweep with replications)."""
    from models.simulation import whatif
    target, sc, grid = _target_hours(args.target_p95_wait), _scenario(args), _grid(args.grid)
    inp = _sim_inputs(args)
    pool = args.pool or (inp.cluster.pools[0] if len(inp.cluster.pools) == 1 else None)
    if pool is None:
        raise UsageError(f"--pool is required when there are several pools: {', '.join(inp.cluster.pools)}")
    _say(args, f"plan: {_sim_window(inp)}; {args.replications} replications per grid point")
    try:
        table, answer = whatif.plan_capacity(inp, pool, target, sc, grid, args.replications, args.seed)
    except ValueError as exc:
        raise CliError(str(exc)) from exc
    emit(table, args.format, args.out)
    if answer is None:
        _err(f"no grid point up to {table['nodes'].max()} {pool} nodes meets p95 wait of {pool} jobs <= {target:g} h; "
             "extend --grid")
        return EXIT_ERROR
    _err(f"smallest {pool} capacity meeting p95 wait of {pool} jobs <= {target:g} h: {answer['nodes']} nodes "
         f"({answer['gpus']:g} GPUs; now {answer['current_nodes']} nodes), p95 wait {answer['p95_wait_h']:.2f} h "
         f"[95% interval {answer['ci_low']:.2f}-{answer['ci_high']:.2f} h over {args.replications} replications]"
         + ("" if answer["meets_with_confidence"] else "; the interval's upper end exceeds the target"))
    return EXIT_OK


# ---------------------------------------------------------------- dashboard and demo

def cmd_dashboard(args) -> int:
    """Serve the dashboards; they read only the serving snapshot, so ingests can run meanwhile.

    With ``--config``: host and port from its [dashboard] table (the command line's win), who may connect from its
    [access] table (dashboards/access.py), the warehouse from its [service] table (unless --db). Without an
    [access] table only loopback is served, whatever --host says."""
    from dashboards import access, server
    from ingest import warehouse
    from ingest.errors import InputError
    host, port, guarded, db = args.host, args.port, False, _db_path(args)
    if args.config:
        try:
            cfg = access.read_config(args.config)
        except InputError as exc:
            raise CliError(str(exc)) from exc
        host, port, guarded = host or cfg.host, port or cfg.port, cfg.access is not None
        if cfg.warehouse and not args.db:      # the collector's warehouse, unless --db names another
            db = Path(cfg.warehouse)
    if not warehouse.serving_path(db).exists():
        _say(args, f"gpuledger dashboard: no snapshot of {db} yet; the first page explains how to load data "
                   "(`gpuledger refresh` publishes one from an existing warehouse)")
    host = host or "127.0.0.1"
    if not guarded and not access.is_loopback(host):
        _say(args, f"gpuledger dashboard: no [access] table configured (--config), so only this machine is "
                   f"served: binding 127.0.0.1, not {host}")
        host = "127.0.0.1"
    elif not guarded:
        _say(args, "gpuledger dashboard: no [access] table configured: serving this machine only, its users with "
                   "full rights")
    try:
        return server.serve(db, port=port or 8501, host=host, config=args.config)
    except server.PortInUse as exc:
        raise CliError(str(exc)) from exc


def cmd_serve(args) -> int:
    """Run the collector service from a config: scheduled collection, refresh and publish, /healthz and /metrics,
    and the dashboard child (unless --no-dashboard) told the config's path in $GPULEDGER_CONFIG."""
    import logging
    from dataclasses import replace
    from dashboards import server
    from ingest.errors import InputError
    from models.service import config, loop
    try:
        cfg = config.load(args.config)
    except InputError as exc:
        raise CliError(str(exc)) from exc
    if getattr(args, "db", None):
        cfg = replace(cfg, warehouse=Path(args.db))
    if args.health_listen is not None:
        try:
            cfg = replace(cfg, health_listen=config.parse_listen(args.health_listen, "--health-listen"))
        except ValueError as exc:
            raise UsageError(f"serve: {exc}") from exc
    logging.basicConfig(level=logging.WARNING if args.quiet else logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(message)s")
    dashboard = None
    if cfg.dashboard and not args.no_dashboard and not args.once:
        os.environ["GPULEDGER_CONFIG"] = str(cfg.path.resolve())     # the dashboard reads its [access] table
        server.check_port(cfg.dashboard_port, cfg.dashboard_host)

        def dashboard():
            return server.start(cfg.warehouse, cfg.dashboard_port, cfg.dashboard_host)
    try:
        return loop.serve(cfg, dashboard, once=args.once, after_cycle=_scheduled_reports(cfg))
    except (server.PortInUse, OSError) as exc:
        raise CliError(f"serve: {exc}") from exc


def _scheduled_reports(cfg) -> tuple:
    """The service's after-cycle step that sends the config's [[reports]] when due (none without them): the
    dashboards render (reading the snapshot of the service's warehouse), models/service/reports.py schedules,
    sends and stores the runs."""
    from dashboards import reports as rendering
    from ingest import encoding
    from ingest.errors import InputError
    from models.service import reports
    try:
        rcfg = reports.parse(cfg, encoding.read_text(cfg.path))
    except InputError as exc:
        raise CliError(str(exc)) from exc
    if not rcfg.reports:
        return ()
    os.environ["GPULEDGER_DB"] = str(cfg.warehouse)       # the renderer reads this warehouse's snapshot
    return (reports.step(cfg.warehouse, cfg.lock_timeout_s, rcfg, rendering.for_recipient),)


#: The demo's own warehouse: `demo` never writes to $GPULEDGER_DB (that may be a real site's warehouse).
DEMO_DB = Path("data") / "demo.duckdb"


def cmd_demo(args) -> int:
    """Build the demo warehouse from the synthetic cluster (unless it is already up to date), then serve it."""
    from models.demo import build, config
    db = Path(args.db) if args.db else DEMO_DB
    try:
        cfg = config.for_scale(args.scale, seed=args.seed, **({"days": args.days} if args.days else {}))
    except (ValueError, TypeError) as exc:
        raise UsageError(f"demo: {exc}") from exc
    if not args.rebuild and build.is_up_to_date(db, cfg):
        _say(args, f"gpuledger demo: {db} is up to date (seed {cfg.seed}, scale {cfg.scale:g}); --rebuild to redo it")
    else:
        _say(args, f"gpuledger demo: building {db} from a synthetic {cfg.cluster!r} cluster "
                   f"(seed {cfg.seed}, scale {cfg.scale:g}, {cfg.days} days) ...")
        say = (lambda m: _say(args, "  " + m)) if sys.stderr.isatty() else None  # quiet when piped
        info = build.build(db, cfg, progress=say, keep_inputs=args.keep_inputs)
        _say(args, f"gpuledger demo: built {db}: {info['jobs']:,} jobs on {info['nodes']:,} nodes in "
                   f"{info['seconds']['total']:.0f} s" + (f"; inputs kept in {info['inputs']}" if info["inputs"] else ""))
    if args.no_serve:
        _print(str(db))
        return EXIT_OK
    from dashboards import server
    try:
        return server.serve(db, port=args.port, host=args.host)
    except server.PortInUse as exc:
        raise CliError(str(exc)) from exc


# ---------------------------------------------------------------- the parser

TIME_HELP = "ISO 8601 date or time, or epoch seconds; UTC unless an offset is given"
BUCKETS = ("hour", "day", "week", "month")


def _common_options(p: argparse.ArgumentParser, top: bool = False, db_help: str | None = None) -> None:
    """--db and -q, accepted before the command and after it (a value after it wins)."""
    d = {} if top else {"default": argparse.SUPPRESS}
    p.add_argument("--db", metavar="PATH", help=db_help or "warehouse file (default $GPULEDGER_DB, else "
                                                           "data/warehouse.duckdb)", **d)
    p.add_argument("-q", "--quiet", action="store_true", help="print only results and errors", **d)


def _command(sub, name: str, func, help: str, description: str | None = None, **kw) -> argparse.ArgumentParser:
    s = sub.add_parser(name, help=help, description=description or help)
    _common_options(s, **kw)
    s.set_defaults(func=func)
    return s


def _window_options(p) -> None:
    p.add_argument("--from", dest="date_from", metavar="T", help=f"start of the window, inclusive ({TIME_HELP})")
    p.add_argument("--to", dest="date_to", metavar="T", help="end of the window, exclusive (same forms)")


def _output_options(p, formats=("table", "csv", "json", "parquet")) -> None:
    p.add_argument("--format", choices=formats, help="output format (default: by --out extension, else a text table)")
    p.add_argument("--out", metavar="FILE", help="write to FILE (.csv, .json or .parquet) instead of stdout")


def _no_refresh(p) -> None:
    p.add_argument("--no-refresh", action="store_true", help="do not refresh marts after loading")


def _ingest_parsers(sub) -> None:
    ing = sub.add_parser("ingest", help="load scheduler accounting, inventory, telemetry, traces or governance")
    _common_options(ing)
    ising = ing.add_subparsers(dest="source", metavar="SOURCE", required=True)
    _sacct_parser(ising)
    _slurm_parsers(ising)
    _queue_source_parsers(ising)
    _telemetry_parsers(ising)
    _trace_parser(ising)
    _governance_parser(ising)


def _sacct_parser(ising) -> None:
    s = _command(ising, "sacct", cmd_ingest_sacct,
                 "Slurm accounting: `sacct --parsable2` output, or run sacct itself (--live)",
                 "Load `sacct -P`/`--parsable` output (header line optional; steps are counted as skipped). With "
                 "--live, run sacct from the last watermark.")
    s.add_argument("files", nargs="*", metavar="FILE", help="sacct output files, '-' for stdin")
    s.add_argument("--cluster", help="cluster name when the input has no Cluster column")
    s.add_argument("--tz", help="zone of times printed without an offset (default: the cluster's zone, else UTC)")
    s.add_argument("--fields", help="comma-separated column names for headerless input (default: Open XDMoD's list)")
    s.add_argument("--delimiter", help="field separator (default: '^|^' if seen on the first line, else '|')")
    s.add_argument("--strict", action="store_true", help="exit 1 if any line is rejected")
    s.add_argument("--live", action="store_true", help="run sacct itself (TZ=UTC) from the last watermark")
    s.add_argument("--since", metavar="T", help=f"with --live: start time instead of the watermark ({TIME_HELP})")
    s.add_argument("--sacct-cmd", default=os.environ.get("GPULEDGER_SACCT", "sacct"), help=argparse.SUPPRESS)
    s.add_argument("--sdiag-cmd", metavar="CMD", default=os.environ.get("GPULEDGER_SDIAG", "sdiag"),
                   help="with --live: the sdiag whose 'DBD Agent queue size' says slurmctld still holds records "
                        "for slurmdbd, so the watermark stays (default sdiag; '' not to ask)")
    _no_refresh(s)


def _slurm_parsers(ising) -> None:
    s = _command(ising, "nodes", cmd_ingest_nodes,
                 "node inventory: `scontrol show node [-o]`, sinfo output with Gres, or a JSON node list")
    s.add_argument("files", nargs="+", metavar="FILE", help="'-' for stdin")
    s.add_argument("--format", choices=["auto", "scontrol", "sinfo", "json"], default="auto",
                   help="input format (default auto)")
    s.add_argument("--cluster", default=None, help="cluster name (default: the input's Cluster column, else the only "
                                                   "cluster known; required otherwise)")
    s.add_argument("--as-of", metavar="T", help=f"when the snapshot was taken (default now; {TIME_HELP})")
    s.add_argument("--retire-missing", action="store_true",
                   help="nodes absent from this snapshot leave the inventory as of --as-of")
    s.add_argument("--fields", metavar="LIST",
                   help="the columns of sinfo output without a header line: its -O list as given to sinfo "
                        "(e.g. 'NodeList:|,Partition:|,StateLong:|,Gres:|'; widths and separators allowed)")
    _no_refresh(s)
    s = _command(ising, "events", cmd_ingest_events, "node outages: `sacctmgr -P show event All_Time`")
    s.add_argument("files", nargs="+", metavar="FILE", help="'-' for stdin")
    s.add_argument("--cluster", default=None, help="cluster name when the input has no Cluster column")
    s.add_argument("--tz", help="zone of times printed without an offset (default: the cluster's zone, else UTC)")
    _no_refresh(s)


def _queue_source_parsers(ising) -> None:
    """`ingest squeue|reservations|job-gpus`: why jobs wait, who holds reserved GPUs, which GPUs a job holds."""
    s = _command(ising, "squeue", cmd_ingest_squeue, "queue snapshots: squeue output in our --Format, or run it (--live)",
                 "Load squeue snapshots (one '|'-separated line per job with a header; the format --live runs: "
                 "docs/CLI.md), or a log of `squeue --iterate N` with the time line above each snapshot. Each "
                 "pending job's reason holds from its snapshot until the next one.")
    s.add_argument("files", nargs="*", metavar="FILE[@TIME]",
                   help="squeue output files; TIME = when it was taken (a `squeue --iterate` log needs none)")
    s.add_argument("--captured-at", metavar="T", help=f"when files without @TIME were taken ({TIME_HELP})")
    s.add_argument("--live", action="store_true", help="run squeue itself (TZ=UTC) now")
    s.add_argument("--cluster", help="cluster name (default: the only cluster known, else 'default')")
    s.add_argument("--tz", help="zone of times printed without an offset (default UTC)")
    s.add_argument("--strict", action="store_true", help="exit 1 if any line is rejected")
    s.add_argument("--squeue-cmd", default=os.environ.get("GPULEDGER_SQUEUE", "squeue"), help=argparse.SUPPRESS)
    _no_refresh(s)
    s = _command(ising, "reservations", cmd_ingest_reservations,
                 "advance reservations: `scontrol show reservation [-o]` or `sacctmgr -P show reservation`",
                 "Load reservations (name, start, end, nodes, TRES, users, accounts, flags). --live runs `scontrol show "
                 "reservation -o` (owners) and then `sacctmgr -P show reservation` (history, real ends).")
    _files_or_live(s, "run scontrol and sacctmgr (TZ=UTC) now",
                   "cluster name when the input has none (default: the only cluster known)")
    s = _command(ising, "job-gpus", cmd_ingest_job_gpus,
                 "the GPUs (device indices) each job holds: `scontrol -d show job [-o]`",
                 "Load which GPUs each running job holds (GRES=gpu:2(IDX:0-1)), so its telemetry is attributed "
                 "exactly. Slurm keeps them only while it remembers the job: collect them live (--live, or the "
                 "service's job-gpus source). The jobs must be loaded first (ingest sacct).")
    _files_or_live(s, "run `scontrol -d -o show job` (TZ=UTC) now",
                   "cluster of the jobs (default: the only cluster known)")


def _files_or_live(s, live_help: str, cluster_help: str) -> None:
    """The arguments of an ingest that reads FILEs or runs its Slurm command (--live)."""
    s.add_argument("files", nargs="*", metavar="FILE", help="'-' for stdin")
    s.add_argument("--live", action="store_true", help=live_help)
    s.add_argument("--cluster", help=cluster_help)
    s.add_argument("--tz", help="zone of times printed without an offset (default UTC)")
    s.add_argument("--strict", action="store_true", help="exit 1 if any line is rejected")
    _no_refresh(s)


def _telemetry_common(s, node_help: str) -> None:
    s.add_argument("--cluster", help="cluster of the readings (default: a `cluster` label, else the only cluster "
                                     "known, else 'default')")
    s.add_argument("--node", help=node_help)
    s.add_argument("--keep-raw-days", type=float, metavar="N",
                   help="after loading, delete raw rows older than N days before the newest (the 5-minute rollup "
                        "keeps them); default: keep everything")
    s.add_argument("--strict", action="store_true", help="exit 1 if any line was rejected")
    _no_refresh(s)


def _telemetry_parsers(ising) -> None:
    """`ingest prometheus|dcgm|nvidia-smi`."""
    s = _command(ising, "prometheus", cmd_ingest_prometheus, "DCGM exporter series over the Prometheus HTTP API",
                 "Pull the DCGM exporter metrics gpuledger uses (GPU_UTIL, SM_ACTIVE, GR_ENGINE_ACTIVE, "
                 "PIPE_TENSOR_ACTIVE, FB_USED, POWER_USAGE, GPU_TEMP, XID_ERRORS) with query_range, in chunks under "
                 "Prometheus' 11,000 points per series. Credentials only from the environment: GPULEDGER_PROM_TOKEN "
                 "(bearer) or GPULEDGER_PROM_USER + GPULEDGER_PROM_PASSWORD (basic).")
    s.add_argument("--url", required=True, help="Prometheus base URL, e.g. http://prometheus:9090")
    s.add_argument("--start", required=True, metavar="T", help="ISO 8601 time or epoch seconds (UTC unless --tz)")
    s.add_argument("--end", required=True, metavar="T", help="ISO 8601 time or epoch seconds, inclusive")
    s.add_argument("--step", default="60s", help="resolution, e.g. 60s, 5m (default 60s; stored rows are >= 1 min)")
    s.add_argument("--match", metavar="SELECTOR", help='extra label matchers for every metric, e.g. {Hostname=~"gpu.*"}')
    s.add_argument("--aggregate", nargs="?", const="5m", metavar="INTERVAL",
                   help="push-down: ask the store for per-GPU aggregates per INTERVAL (default 5m, UTC-aligned) "
                        "instead of every minute; see docs/METRICS.md, Push-down telemetry")
    s.add_argument("--tz", help="zone of --start/--end given without an offset (default UTC)")
    s.add_argument("--timeout", type=float, default=60.0, metavar="S", help="seconds per HTTP request (default 60)")
    s.add_argument("--retries", type=int, default=3, metavar="N",
                   help="retries of a transient failure, with exponential backoff (default 3)")
    _telemetry_common(s, "node of series without a Hostname label (default: the host of the `instance` label)")

    s = _command(ising, "dcgm", cmd_ingest_dcgm, "scraped DCGM exporter /metrics text files (Prometheus text or "
                 "OpenMetrics)", "Load scraped dcgm-exporter /metrics files. Lines with a timestamp keep it "
                 "(OpenMetrics: seconds; Prometheus text: milliseconds); lines without one take the file's scrape "
                 "time: FILE@TIME, or --scrape-time for every file.")
    s.add_argument("files", nargs="+", metavar="FILE[@TIME]")
    s.add_argument("--scrape-time", metavar="T", help="time of readings without a timestamp (ISO 8601 / epoch)")
    s.add_argument("--tz", help="zone of scrape times given without an offset (default UTC)")
    s.add_argument("--format", choices=["auto", "openmetrics", "prometheus"], default="auto",
                   help="timestamp unit: openmetrics = seconds, prometheus = milliseconds (auto: '# EOF' present)")
    s.add_argument("--interval", metavar="S", help="resolution of a GPU seen once in a file (default 60s)")
    _telemetry_common(s, "node of series without a Hostname/hostname label")

    s = _command(ising, "nvidia-smi", cmd_ingest_nvidia_smi, "`nvidia-smi --query-gpu ... --format=csv` logs",
                 "Load `nvidia-smi --query-gpu=timestamp,index,uuid,name,utilization.gpu,memory.used,power.draw,"
                 "temperature.gpu --format=csv[,noheader][,nounits]` output. [N/A] cells are no reading (never 0).")
    s.add_argument("files", nargs="+", metavar="FILE")
    s.add_argument("--tz", help="zone of the timestamps (nvidia-smi prints local time; default: the cluster's "
                                "zone, else UTC)")
    s.add_argument("--fields", metavar="LIST", help="the --query-gpu list, for output without a header line")
    s.add_argument("--interval", metavar="S", help="resolution of a GPU seen once in a file (default 60s)")
    _telemetry_common(s, "the host the log was taken on (required unless the query has a hostname column)")


TRACES = ["alibaba-openb", "mit-supercloud", "alibaba-pai-2020", "alibaba-genai", "philly", "acme"]


def _trace_parser(ising) -> None:
    s = _command(ising, "trace", cmd_ingest_trace, "public GPU cluster traces (alibaba-openb, mit-supercloud, ...)",
                 "Convert a public GPU-cluster trace into the canonical tables (mapping and what each trace lacks: "
                 "docs/TRACES.md). PATH is a trace file or the directory holding the trace's files.")
    s.add_argument("kind", choices=TRACES, metavar="KIND", help=", ".join(TRACES))
    s.add_argument("path", metavar="PATH", help="trace file or directory")
    s.add_argument("--cluster", help="cluster name to load into (default: per trace, e.g. openb, supercloud)")
    s.add_argument("--start", metavar="T",
                   help="where 'seconds from trace start' land (openb; default 2023-01-02) or the week PAI's "
                        f"shifted times are moved to (default July 2020); {TIME_HELP}")
    s.add_argument("--tz", help="zone of local timestamps (philly; default America/Los_Angeles)")
    s.add_argument("--nodes", metavar="FILE", help="openb: node list to load with a pod list (default: the "
                                                   "pod list's directory's openb_node_list_all_node.csv)")
    _no_refresh(s)


def _governance_parser(ising) -> None:
    s = _command(ising, "governance", cmd_ingest_governance, "teams, cost centres, entitlements, rates and policies "
                 "(TOML)", "Load a governance file (format: data/governance.example.toml). It replaces the teams, "
                 "mappings, entitlements, rate card and policies in one transaction and re-maps every job to its "
                 "team; a bad file changes nothing.")
    s.add_argument("file", metavar="FILE.toml")
    s.add_argument("--check", action="store_true", help="only validate the file; write nothing")
    s.add_argument("--format", choices=["table", "csv", "json"], default="table",
                   help="format of the rate card printed after loading (default table)")
    _no_refresh(s)


def _report_parsers(sub) -> None:
    rep = sub.add_parser("report", help="utilization, efficiency, fragmentation, fairness, queue, losses and reliability reports")
    _common_options(rep)
    isrep = rep.add_subparsers(dest="report", metavar="REPORT", required=True)
    s = _command(isrep, "utilization", cmd_report_utilization,
                 "capacity, allocated, idle and unavailable GPU-hours; sreport categories")
    _window_options(s)
    s.add_argument("--bucket", choices=BUCKETS, default="day", help="time bucket (default day)")
    s.add_argument("--by", metavar="COLS", help="cluster (default), gpu_type (pool), partition, team, account, "
                                                "user, job_partition, qos; comma-separated")
    _output_options(s)
    _efficiency_parser(isrep)
    _fragmentation_parser(isrep)
    _fairness_parser(isrep)
    _queue_parser(isrep)
    _losses_parsers(isrep)
    _waiting_parsers(isrep)
    _scheduled_report_parsers(isrep)
    _budgets_parser(isrep)


def _waiting_parsers(isrep) -> None:
    """`report preemption|reservations|pending`."""
    s = _command(isrep, "preemption", cmd_report_preemption,
                 "preempted GPU-hours per victim team and preemptor QOS/team, requeues, work lost")
    _window_options(s)
    s.add_argument("--grace", type=int, default=60, metavar="S",
                   help="a preemptor starts on the victim's nodes within S seconds of its end (default 60)")
    s.add_argument("--view", choices=["victims", "preemptors", "jobs"],
                   help="one view (default: all three on a terminal, victims to a file)")
    _output_options(s)
    s = _command(isrep, "reservations", cmd_report_reservations,
                 "reserved vs used GPU-hours per reservation, reserved idle and its owner")
    _window_options(s)
    _output_options(s)
    s = _command(isrep, "pending", cmd_report_pending,
                 "why jobs pend: waiting GPU-hours per team and Slurm reason (squeue snapshots, else sacct)")
    _window_options(s)
    s.add_argument("--by", metavar="COLS", help="team (default), account, user, partition, qos, cluster; comma-separated")
    s.add_argument("--max-gap", default="15m", metavar="DUR",
                   help="a snapshot's reason holds until the next snapshot, at most this long (default 15m)")
    s.add_argument("--view", choices=["classes", "reasons"],
                   help="one view (default: both on a terminal, classes to a file)")
    _output_options(s)


def _efficiency_parser(isrep) -> None:
    s = _command(isrep, "efficiency", cmd_report_efficiency, "how busy allocated GPUs were, from telemetry",
                 "How busy allocated GPUs were, from telemetry: per --by group (user, team, account, partition, qos, "
                 "gpu_type, cluster) and --bucket, per job (--by job), or the worst offenders (--worst N). Activity "
                 "metric: SM_ACTIVE, else GR_ENGINE_ACTIVE, else GPU_UTIL (named in the output). Idle-allocated = "
                 "stretches of >= 5 min at zero activity. Jobs without telemetry are counted as such, never as 0 % "
                 "busy.")
    _window_options(s)
    s.add_argument("--by", metavar="COLS", help="user, team, account, partition, qos, gpu_type, cluster "
                                                "(comma-separated; default none = everything), or job")
    s.add_argument("--bucket", choices=BUCKETS, help="time bucket (default day)")
    s.add_argument("--total", action="store_true", help="one row per group for the whole window (no time bucket)")
    s.add_argument("--worst", type=int, metavar="N", help="the N jobs with the most idle-allocated GPU-hours")
    _output_options(s)


def _fragmentation_parser(isrep) -> None:
    s = _command(isrep, "fragmentation", cmd_report_fragmentation, "free GPUs that pending jobs could not use")
    s.add_argument("--view", choices=["summary", "blocked", "jobs"], default="summary",
                   help="summary (default): free-GPU state per bucket, pool and partition; blocked: queue wait split "
                        "into placeable/fragmentation/capacity per group; jobs: that split per pending job")
    _window_options(s)
    s.add_argument("--bucket", choices=BUCKETS, help="summary: time bucket (default day)")
    s.add_argument("--by", metavar="COLS", help="summary: default gpu_type,partition; blocked: any of cluster, team, "
                                                "account, user, size_class, partition, gpu_type (default team,size_class)")
    s.add_argument("--interval", default="5m", metavar="DUR", help="sampling interval, e.g. 5m (default), 1m, 1h, 300")
    s.add_argument("--popularity", type=float, metavar="X",
                   help="summary: FGD target workload, the most frequent request sizes covering this share of jobs "
                        "(default 1.0 = all; the FGD paper used 0.6 and 0.95)")
    _output_options(s)


def _governance_windows_option(s) -> None:
    _window_options(s)
    s.add_argument("--windows", metavar="DAYS", help="comma-separated window lengths in days ending at the data "
                                                      "horizon (default: the governance's, else 7,30)")


def _fairness_parser(isrep) -> None:
    s = _command(isrep, "fairness", cmd_report_fairness, "usage against entitlement, fair-share factors, Jain and Gini")
    _governance_windows_option(s)
    s.add_argument("--pool", help="one pool (GPU type) only; '(all)' is the whole cluster")
    s.add_argument("--half-life", type=float, metavar="DAYS", help="usage decay half-life (default: governance, 7)")
    s.add_argument("--view", choices=["pools", "teams", "sshare"],
                   help="one view (default: pools and teams on a terminal, teams to a file); 'sshare' = the "
                        "association tree in sshare -l's terms")
    s.add_argument("--as-of", metavar="T", help="with --view sshare: decay usage to this time (default: horizon)")
    s.add_argument("--basis", choices=["billing", "gpu"],
                   help="with --view sshare: raw usage in billing-TRES-seconds (default, as sshare) or GPU-seconds")
    _output_options(s)


def _queue_parser(isrep) -> None:
    s = _command(isrep, "queue", cmd_report_queue, "queue waits per team and size class, starvation")
    _governance_windows_option(s)
    s.add_argument("--by", metavar="COLS", help="waits grouped by any of team, size_class, qos, pool, partition, "
                                                "account, cluster, user (default team,size_class)")
    s.add_argument("--threshold-hours", type=float, metavar="H",
                   help="starvation threshold (default: governance starvation_hours, else 24)")
    s.add_argument("--tau-minutes", type=float, metavar="MIN",
                   help="bounded-slowdown tau (default: governance bsld_tau_minutes, else 10)")
    s.add_argument("--view", choices=["waits", "qos", "starvation", "pending"],
                   help="one view (default: all four on a terminal, waits to a file)")
    _output_options(s)


def _losses_parsers(isrep) -> None:
    s = _command(isrep, "losses", cmd_report_losses, "GPU-hours lost to failures, preemption and timeouts; goodput",
                 "GPU-hours of jobs that ended by a node failure, a GPU XID, another outage, preemption, requeue, "
                 "timeout or their own failure, by cause, per --by group and --bucket, with goodput (allocated "
                 "minus lost, as a share). Lost = GPUs x time since the job's last checkpoint (governance "
                 "[[checkpoints]]), else since its start. --view jobs lists the jobs.")
    _window_options(s)
    s.add_argument("--view", choices=["summary", "jobs"], default="summary",
                   help="summary (default): per bucket and group; jobs: one row per job that lost work")
    s.add_argument("--by", metavar="COLS", help="any of team (default), gpu_type (pool), cluster, node, cause; "
                                                "allocated and goodput come with cluster/team/gpu_type only")
    s.add_argument("--bucket", choices=["day", "week", "month"], help="time bucket (default month)")
    s.add_argument("--total", action="store_true", help="one row per group for the whole window (no time bucket)")
    s.add_argument("--cause", choices=["node_failure", "gpu_xid", "outage", "preemption", "requeue", "timeout",
                                       "user_failure"], help="with --view jobs: one cause only")
    s.add_argument("--limit", type=int, metavar="N", help="with --view jobs: the N jobs that lost most")
    _output_options(s)
    s = _command(isrep, "reliability", cmd_report_reliability, "node outages, MTBF/MTTR, repeat offenders, XIDs, "
                 "slow nodes", "Node reliability: outages per node and pool with MTBF and MTTR, each outage with "
                 "the jobs it killed, repeat offenders (nodes whose jobs fail more than their pool's, by a "
                 "one-sided binomial test with Benjamini-Hochberg correction), GPUs with XID errors, and slow "
                 "nodes (below their peers in multi-node jobs, from telemetry).")
    _window_options(s)
    s.add_argument("--view", choices=RELIABILITY_VIEWS, default="nodes",
                   help="nodes (default), pools, outages, offenders, gpus (XIDs), slow-nodes, slow-jobs (evidence); "
                        "teams: per team lost GPU-hours by cause, slow-node held back, preemption, goodput; pull: "
                        "the ranked nodes to pull with evidence (teams and pull default to the last full month)")
    s.add_argument("--fdr", type=float, metavar="Q", help="with --view offenders: false-discovery rate (default 0.05)")
    _output_options(s)


CHARGEBACK_VIEWS = ["summary", "by team", "by cost centre", "by gpu type", "reconciliation", "adjustments", "by rate",
                    "rate card", "jobs"]


def _chargeback_parser(sub) -> None:
    s = _command(sub, "chargeback", cmd_chargeback, "monthly statement per team and cost centre, reconciled to the cent",
                 "The month's GPU statement per team and cost centre, by GPU type: GPU-hours, rate, direct cost, "
                 "share of idle cost, waste beside, total; a reconciliation proves that cluster cost = charged to "
                 "teams (direct + idle shares) + unallocated idle + rate variance + rounding residue. A closed "
                 "period is frozen and re-exports byte-identically; late jobs appear as adjustment lines in the "
                 "next open period.")
    s.add_argument("--period", required=True, metavar="YYYY-MM", help="calendar month (in the governance "
                                                                      "period_timezone)")
    s.add_argument("--out", metavar="FILE|DIR",
                   help="FILE.csv, FILE.xlsx or FILE.parquet (CSV/Parquet write one file per view beside FILE); "
                        "a directory gets chargeback-YYYY-MM.<format>")
    s.add_argument("--format", choices=["table", "csv", "json", "xlsx", "parquet"],
                   help="output format (default: by --out extension, else a text table)")
    s.add_argument("--view", choices=CHARGEBACK_VIEWS, help="print one view only (without --out)")
    s.add_argument("--close", action="store_true",
                   help="freeze the period's statement (content hash + timestamp); refused until the accounting "
                        "covers the whole month")


def _forecast_parser(sub) -> None:
    s = _command(sub, "forecast", cmd_forecast, "GPU demand forecasts with intervals and capacity exhaustion dates",
                 "Forecast GPU demand per group (or a CSV series of your own) with the model each series' "
                 "rolling-origin backtest chooses, 80 % and 95 % intervals with their backtest coverage, and per "
                 "pool the date demand outgrows capacity x target utilisation. See docs/FORECAST.md.")
    s.add_argument("--by", metavar="COLS",
                   help="warehouse: any of cluster,pool,partition,team (default pool); CSV: key columns of the file")
    s.add_argument("--horizon", type=int, default=90, metavar="N", help="periods ahead, in the series' own "
                   "frequency (days for daily series, hours for hourly); default 90")
    s.add_argument("--series", metavar="FILE.csv", help="forecast a timestamp,value CSV instead of the warehouse")
    s.add_argument("--out", metavar="FILE", help="forecast rows to FILE (.csv, .json or .parquet)")
    s.add_argument("--summary-out", metavar="FILE", help="per-series backtest of every model and notes to FILE")
    s.add_argument("--plot", metavar="FILE.html", help="interactive chart of history, forecast and bands")
    s.add_argument("--format", choices=["table", "csv", "json"],
                   help="csv/json: print the forecast rows instead of the report")
    s.add_argument("--freq", choices=["hour", "day", "week", "month"],
                   help="warehouse: hour or day (default day); CSV: default inferred from the timestamps")
    s.add_argument("--measure", choices=["demanded", "served", "peak"],
                   help="warehouse: demanded GPU-hours submitted (default), served (allocated) GPU-hours, or peak "
                        "running+pending GPUs (docs/FORECAST.md says which to use when)")
    s.add_argument("--cluster", metavar="C", help="warehouse: only this cluster")
    s.add_argument("--capacity", action="append", default=[], metavar="POOL=GPUS",
                   help="installed GPUs of a pool (overrides the inventory; repeatable); a bare GPUS applies "
                        "to every series")
    s.add_argument("--target-util", type=float, default=0.85, metavar="U",
                   help="utilisation a pool should not exceed (default 0.85)")
    s.add_argument("--band", choices=["median", "80", "95"], default="80",
                   help="which forecast sizes 'GPUs needed': the median or the upper bound of the 80 %%/95 %% "
                        "interval (default 80)")
    s.add_argument("--window", type=int, metavar="N",
                   help="periods averaged before comparing with capacity (default: 24 hours, 7 days, 1 week, 1 month)")
    s.add_argument("--unit", choices=["gpus", "gpu-hours"],
                   help="CSV: unit of the values, for the capacity comparison (default gpus)")
    s.add_argument("--agg", choices=["mean", "sum"], help="CSV: how values within one period are combined "
                                                          "(default mean)")
    s.add_argument("--no-level-shifts", action="store_true",
                   help="fit on the whole history even after a detected level shift")
    s.add_argument("--keep-outliers", "--keep-bursts", dest="keep_outliers", action="store_true",
                   help="fit on bursts and outages as they are (default: a period above 3x, or below 1/3 of, its "
                        "season position a cycle before and after, and beyond 6 robust sd of its usual value, is "
                        "replaced for fitting by that value at the level around it)")


def _scenario_options(s, replications: int) -> None:
    s.add_argument("--add", action="append", default=[], metavar="POOL=N", help="add N nodes to a pool (repeatable)")
    s.add_argument("--remove", action="append", default=[], metavar="POOL=N",
                   help="remove N nodes from a pool (repeatable)")
    s.add_argument("--demand-scale", type=float, default=1.0, metavar="X",
                   help="scale demand by resampling whole observed days (seeded), e.g. 1.3 (default 1)")
    s.add_argument("--runtime-scale", type=float, default=1.0, metavar="X",
                   help="scale run times and limits (default 1)")
    s.add_argument("--policy", default="fifo-backfill",
                   help="fifo, fifo-backfill, priority or priority-backfill (default fifo-backfill)")
    s.add_argument("--placement", default="best-fit", choices=["first-fit", "best-fit", "random", "fgd"],
                   help="node choice for a job (default best-fit)")
    s.add_argument("--bf-max-job-test", type=int, default=500, metavar="N",
                   help="backfill queue depth per pass, as Slurm's bf_max_job_test (default 500)")
    s.add_argument("--bf-interval", type=float, default=30.0, metavar="S",
                   help="seconds between backfill passes, as Slurm's bf_interval (default 30; 0 = every event)")
    s.add_argument("--from", dest="date_from", metavar="T", help=f"window start (default: first submit; {TIME_HELP})")
    s.add_argument("--to", dest="date_to", metavar="T", help="window end, exclusive (default: day after last submit)")
    s.add_argument("--cluster", help="only this cluster")
    s.add_argument("--replications", type=int, default=replications, metavar="R",
                   help=f"replications (day bootstraps) for the intervals (default {replications})")
    s.add_argument("--seed", type=int, default=0, help="seed of the first replication (default 0)")
    s.add_argument("--no-events", action="store_true", help="ignore node outages from node_events")
    s.add_argument("--no-reservations", action="store_true",
                   help="the scenario without the advance reservations (their jobs run as ordinary jobs); the "
                        "baseline keeps them")
    _output_options(s)


def _simulate_parsers(sub) -> None:
    s = _command(sub, "simulate", cmd_simulate, "what-if replay of the workload through a scheduler simulator",
                 "Replay the warehouse's GPU jobs on its nodes through a Slurm-like scheduler simulator "
                 "(docs/SIMULATOR.md) under a what-if scenario and under the baseline (the observed capacity and "
                 "workload, same policy, seeds and replications); prints p50/p95 wait (hours) overall, per team "
                 "and per size class, utilization and fragmentation, each with a 95% interval, and the change.")
    _scenario_options(s, 10)
    s.add_argument("--by", default="team,size_class", metavar="COLS",
                   help="wait breakdowns: any of team, size_class, account, pool, partition (default team,size_class)")
    s.add_argument("--validate", action="store_true",
                   help="replay the observed workload on the observed capacity and compare per-job waits")
    simsub = s.add_subparsers(dest="sim_command", metavar="placement")
    sp = _command(simsub, "placement", cmd_simulate_placement, "FGD-paper placement protocol on an Alibaba openb trace",
                  "Weng et al. (ATC'23) protocol: trace pods resampled to 130% of GPU capacity, shuffled, placed one "
                  "at a time without departures; GPU allocation and fragmentation rate at each 1% of arrived demand "
                  "(docs/SIMULATOR.md).")
    sp.add_argument("--trace", required=True, metavar="PATH", help="openb_pod_list_*.csv")
    sp.add_argument("--nodes", metavar="PATH", help="node list (default openb_node_list_gpu_node.csv beside the trace)")
    sp.add_argument("--policy", required=True, metavar="NAME",
                    help="Random, DotProd, GpuClustering, GpuPacking, BestFit, FGD, a comma list, or all")
    sp.add_argument("--seeds", type=int, default=10, metavar="N", help="number of seeds (default 10)")
    sp.add_argument("--first-seed", type=int, default=42, metavar="S", help="seeds S..S+N-1 (default 42, as the paper)")
    sp.add_argument("--popularity", type=float, default=0.95,
                    help="share of pods the typical pod specs must cover (default 0.95)")
    sp.add_argument("--tie-break", choices=["name", "random"], default="name",
                    help="equal scores: 'name' = one seeded node order per seed, as the paper's patched scheduler "
                         "(default); 'random' = uniform, as upstream Kubernetes")
    sp.add_argument("--out", metavar="FILE", help="curves (CSV/JSON/Parquet by extension)")
    sp.add_argument("--plot", metavar="FILE.html", help="write an interactive figure of the curves")
    sp.add_argument("--format", choices=["table", "csv", "json"], help="format of the summary on stdout")


def _plan_parser(sub) -> None:
    s = _command(sub, "plan", cmd_plan, "smallest capacity that meets a p95 queue-wait target",
                 "Sweep a grid of node counts for one pool (backfill is not monotone in capacity, so no bisection) "
                 "and report the smallest count from which the simulated p95 wait of the pool's jobs stays within the "
                 "target, with its 95% interval.")
    s.add_argument("--target-p95-wait", required=True, metavar="DURATION",
                   help="e.g. 2h, 90m, 1.5d or seconds (7200)")
    s.add_argument("--pool", metavar="POOL", help="pool (GPU type) to size; required if there are several")
    s.add_argument("--grid", metavar="N,N,...", help="node counts to try (default: 13 points from half to twice today)")
    _scenario_options(s, 5)


def _serve_options(s, what: str, from_config: bool = False) -> None:
    # the dashboard's defaults come from --config's [dashboard] table when given, so they are resolved later
    s.add_argument("--port", type=int, default=None if from_config else 8501, help=f"{what} TCP port (default 8501)")
    s.add_argument("--host", default=None if from_config else "127.0.0.1",
                   help=f"{what} bind address (default 127.0.0.1; 0.0.0.0 only behind an authenticating proxy)")


def _serving_parsers(sub) -> None:
    s = _command(sub, "dashboard", cmd_dashboard, "serve the Streamlit dashboards on 127.0.0.1",
                 "Serve the governance dashboards (Streamlit) for the warehouse. They read the read-only serving "
                 "snapshot that every ingest/refresh republishes, never the warehouse itself, so ingests can run "
                 "while they are open.")
    _serve_options(s, "dashboard", from_config=True)
    s.add_argument("--config", metavar="FILE",
                   help="service configuration (data/gpuledger.example.toml): [dashboard] host and port (the "
                        "command line's win), [access] who may connect (dashboards/access.py); without [access] "
                        "only loopback is served")
    s = _command(sub, "demo", cmd_demo, "build the demo warehouse from a synthetic cluster and serve the dashboard",
                 "Generate a realistic synthetic GPU cluster (scale 1: 60 nodes x 8 GPUs, 26 weeks, 12 teams), write "
                 "it as real sacct/scontrol/sacctmgr/DCGM/governance files, ingest them through the normal ingestors "
                 "into data/demo.duckdb (or --db), refresh the marts and serve the dashboard. Re-running reuses an "
                 "up-to-date demo.", db_help="demo warehouse (default data/demo.duckdb; $GPULEDGER_DB is ignored)")
    s.add_argument("--scale", type=float, default=1.0, metavar="N",
                   help="cluster size factor (default 1): nodes grow linearly; from 2 up the period is a year "
                        "(33.33 = 2,000 nodes, ~5 million jobs)")
    s.add_argument("--seed", type=int, default=1, help="random seed (default 1; the same seed gives the same cluster)")
    s.add_argument("--days", type=int, metavar="N", help="length of the period (default 182, a year from scale 2)")
    s.add_argument("--rebuild", action="store_true", help="rebuild even if the demo warehouse is up to date")
    s.add_argument("--keep-inputs", action="store_true", help="keep the generated input files next to the warehouse")
    s.add_argument("--no-serve", action="store_true", help="build only; print the warehouse path")
    _serve_options(s, "dashboard")


def _serve_parser(sub) -> None:
    s = _command(sub, "serve", cmd_serve, "run the collector service: scheduled collection, refresh, dashboard",
                 "One long-running writer: per cluster of the config it collects each source on its schedule (sacct "
                 "from the watermark, node inventory, events, Prometheus/DCGM telemetry, the governance file when it "
                 "changes), then refreshes the marts and publishes the dashboard snapshot; a failing source backs off "
                 "alone. Serves /healthz and /metrics and starts the dashboard. Stops cleanly on SIGTERM or Ctrl-C. "
                 "Config format: data/gpuledger.example.toml.",
                 db_help="warehouse file (default: the config's [service] warehouse)")
    s.add_argument("--config", required=True, metavar="FILE.toml", help="the service config")
    s.add_argument("--no-dashboard", action="store_true", help="do not start the dashboard child")
    s.add_argument("--once", action="store_true",
                   help="run one cycle of every source, refresh, publish and exit (no dashboard, no health server)")
    s.add_argument("--health-listen", metavar="HOST:PORT",
                   help="address of /healthz and /metrics instead of the config's [health] listen ('' turns it off)")


def _export_parsers(sub) -> None:
    exp = sub.add_parser("export", help="write the warehouse where other engines read it (an open Parquet lake)")
    _common_options(exp)
    isexp = exp.add_subparsers(dest="target", metavar="TARGET", required=True)
    s = _command(isexp, "lake", cmd_export_lake, "the canonical tables and marts as Hive-partitioned Parquet",
                 "Write every canonical table and mart (not raw telemetry) to DIR as Hive-partitioned Parquet "
                 "(cluster, month) with DIR/manifest.json (schema version, row counts, content hashes per part). "
                 "Incremental: only parts whose content changed are written; the manifest is swapped atomically "
                 "and replaced parts are deleted after a grace period. Spark, DuckDB or Trino read it (docs/SCALE.md).")
    s.add_argument("dir", metavar="DIR", help="the lake directory (created; empty or an earlier export)")
    s.add_argument("--full", action="store_true", help="write every part again, changed or not")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="gpuledger",
        description="Capacity planning and cost governance for shared GPU clusters, from Slurm accounting and DCGM "
                    "telemetry. --db and -q go before or after the command.")
    _common_options(p, top=True)
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True)
    _ingest_parsers(sub)
    s = _command(sub, "refresh", cmd_refresh, "(re)materialise the marts and publish the dashboard snapshot")
    s.add_argument("--full", action="store_true", help="rebuild every mart from scratch")
    _report_parsers(sub)
    _chargeback_parser(sub)
    _forecast_parser(sub)
    _simulate_parsers(sub)
    _plan_parser(sub)
    _serving_parsers(sub)
    _serve_parser(sub)
    _export_parsers(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    from ingest.errors import InputError
    from ingest.warehouse import WarehouseError
    try:
        return args.func(args) or EXIT_OK
    except UsageError as exc:
        _err(f"gpuledger: {exc}", multiline=False)
        return EXIT_USAGE
    except (CliError, WarehouseError, InputError) as exc:
        _err(f"gpuledger: {exc}", multiline=False)
        return EXIT_ERROR
    except BrokenPipeError:
        return EXIT_OK
    except KeyboardInterrupt:
        print("gpuledger: interrupted; the batch in progress was rolled back", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
