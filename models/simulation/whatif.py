"""What-if questions answered by simulation: replay validation, capacity/demand/policy scenarios with
intervals from replications, and the capacity plan sweep.

All functions take an open warehouse connection and return Polars frames. Waits are in hours in the
outputs; utilization and fragmentation in %; intervals are 95 % t-intervals over replications (each
replication resamples whole days of the observed workload with its own seed).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import timedelta

import duckdb
import numpy as np
import polars as pl
from scipy import stats

from ingest.warehouse import has_table
from models.definitions.labels import ANY_POOL, NONE, SIZE_CLASSES, UNMAPPED, size_class_expr, size_order
from models.metrics import utilization
from models.simulation import workload as sw
from models.simulation.simulate import (EVENT_KINDS, RESERVATION_SCHEMA, Cluster, Policy, SimResult, node_events,
                                         simulate)


@dataclass
class Scenario:
    """A what-if: capacity changes per pool (nodes), demand and run-time scale, scheduler policy."""
    add: dict[str, int] = field(default_factory=dict)
    remove: dict[str, int] = field(default_factory=dict)
    demand_scale: float = 1.0
    runtime_scale: float = 1.0
    policy: Policy = field(default_factory=Policy)
    replay_events: bool = True
    #: honour the advance reservations (off: what if they had not been made; their jobs run as ordinary jobs)
    replay_reservations: bool = True
    # The observed workload already holds what outages did to it: a job killed by a node failure ran its
    # truncated time, and its requeued instance is a job of its own. So by default a job the simulation puts
    # on a failing node ends there too instead of starting again from scratch.
    requeue_killed: bool = False


@dataclass
class Inputs:
    """What the warehouse says about the window: the nodes that exist in it (with ``absent``: drain/up events
    for the times a node was not installed yet or already retired), the jobs (``sw.load_jobs``: the window's
    and those ``carried`` in from before it), the outages (``events``); ``horizon``: where the accounting ends
    (None: at or after t1), which ends what is measured; ``reservations``: the advance reservations overlapping
    the window (``sw.load_reservations``); ``data_start``: where the accounting begins (None: at or before t0),
    which starts what is measured."""
    t0: object
    t1: object
    cluster: Cluster
    jobs: pl.DataFrame
    events: np.ndarray
    absent: np.ndarray = field(default_factory=lambda: node_events(Cluster.from_arrays([]), []))
    horizon: object = None
    reservations: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=RESERVATION_SCHEMA))
    data_start: object = None

    @property
    def days(self) -> int:
        return max(1, int(np.ceil((self.t1 - self.t0).total_seconds() / sw.DAY)))

    @property
    def end_s(self) -> float:
        """Seconds from t0 measured: to t1, or to the horizon when the accounting ends before t1 (after it no job
        arrives or ends, and idle nodes there would read as unused capacity)."""
        end = self.t1 if self.horizon is None or self.horizon >= self.t1 else self.horizon
        return max((end - self.t0).total_seconds(), 1.0)

    @property
    def start_s(self) -> float:
        """Seconds from t0 where what is measured starts: 0, or where the accounting begins when that is later
        (before it the nodes would read as idle: `report utilization` counts no capacity there either)."""
        if self.data_start is None or self.data_start <= self.t0:
            return 0.0
        return min((self.data_start - self.t0).total_seconds(), self.end_s - 1.0)

    @property
    def whole_days(self) -> int:
        """Day slots of the window wholly observed (before the horizon): the days a replication draws from."""
        return max(1, int(self.end_s // sw.DAY))

    def counts(self) -> dict[str, int]:
        """The window's jobs, those of them still queued at the horizon, the jobs carried in from before t0, the
        advance reservations, the window's jobs in one of them and those naming one that is not loaded (or holds
        none of the window's nodes)."""
        own = self.jobs.filter(~pl.col("carried"))
        named = own.filter(pl.col("reservation").is_not_null()) if "reservation" in own.columns else own.head(0)
        # a reservation binds its jobs where it holds some of the cluster's nodes (simulate's rule)
        held = self.reservations.filter(pl.col("nodes").list.set_intersection(self.cluster.node_names).list.len() > 0)
        inside = named["reservation"].is_in(held["name"].implode()).sum() if named.height else 0
        return {"jobs": own.height, "queued_at_horizon": own["observed_wait_s"].null_count(),
                "carried": self.jobs.height - own.height, "reservations": self.reservations.height,
                "in_reservations": int(inside), "reservation_not_loaded": named.height - int(inside)}


def load_inputs(con: duckdb.DuckDBPyConnection, date_from: str | None = None, date_to: str | None = None,
                cluster: str | None = None) -> Inputs:
    t0, t1 = sw.window(con, date_from, date_to, cluster)
    cl, absent = sw.load_cluster(con, t0, t1, cluster)
    jobs = sw.load_jobs(con, t0, t1, cluster)
    if jobs.filter(~pl.col("carried")).height == 0:
        raise ValueError(f"no GPU jobs were submitted in [{t0}, {t1})")
    hz = sw.horizon(con, cluster)
    return Inputs(t0, t1, cl, jobs, sw.load_events(con, cl, t0, t1, cluster), absent,
                  hz if hz is not None and hz < t1 else None, sw.load_reservations(con, t0, t1, cluster),
                  sw.data_start(con, cluster))


def _events(inp: Inputs, sc: Scenario, cl: Cluster) -> np.ndarray:
    """Node availability (always) and observed outages (unless ``replay_events`` is off), on ``cl``'s node
    list: after --add/--remove, events of nodes that still exist, re-indexed."""
    ev = np.concatenate([inp.absent, inp.events]) if sc.replay_events else inp.absent
    if cl is inp.cluster or not ev.size:
        return np.sort(ev, order=["t", "kind"])
    idx = {n: i for i, n in enumerate(cl.node_names)}
    inv = {v: k for k, v in EVENT_KINDS.items()}
    return node_events(cl, [(float(t), idx[inp.cluster.node_names[n]], inv[k]) for t, n, k in ev.tolist()
                            if inp.cluster.node_names[n] in idx])


def scenario_cluster(inp: Inputs, sc: Scenario) -> Cluster:
    """The nodes ``sc`` simulates: the observed ones after its --add/--remove (ValueError if it removes more
    nodes than a pool has)."""
    return inp.cluster.with_nodes(sc.add, sc.remove) if (sc.add or sc.remove) else inp.cluster


def baseline(sc: Scenario) -> Scenario:
    """The scenario's baseline: the observed capacity, workload and advance reservations (no nodes added or
    removed, demand and run times unscaled) under the same policy and outages."""
    return replace(sc, add={}, remove={}, demand_scale=1.0, runtime_scale=1.0, replay_reservations=True)


#: A replay samples the cluster's state at least this many times over what it measures (and at most every
#: ``Policy.sample_dt_s``, an hour): sampled hourly, a window of a few hours whose jobs ran for minutes between two
#: samples read as nothing allocated (0 % replayed against 55 % observed on tests/fixtures/slurm_waiting).
MIN_SAMPLES = 2000


def _run(inp: Inputs, sc: Scenario, jobs: pl.DataFrame, seed: int) -> tuple[SimResult, pl.DataFrame]:
    cl = scenario_cluster(inp, sc)
    events = _events(inp, sc, cl)
    work = sw.to_workload(jobs, runtime_scale=sc.runtime_scale)
    dt = min(sc.policy.sample_dt_s, max(1.0, (inp.end_s - inp.start_s) / MIN_SAMPLES))
    pol = Policy(**{**sc.policy.__dict__, "seed": seed, "requeue_on_failure": sc.requeue_killed, "sample_dt_s": dt})
    res = simulate(cl, work, pol, events, sample_window=(inp.start_s, inp.end_s),
                   reservations=inp.reservations if sc.replay_reservations else None)
    out = res.jobs.join(jobs.select("job_uid", "observed_wait_s", "carried"), on="job_uid", how="left")
    return res, out


#: What a group reads when the job does not name it (models/definitions/labels.py), not "None".
GROUP_LABELS = {"team": UNMAPPED, "pool": ANY_POOL, "partition": NONE, "account": NONE}


def _metrics(res: SimResult, jobs: pl.DataFrame, horizon: float, by: list[str]) -> pl.DataFrame:
    """One replication's metrics over [0, horizon) s: p50/p95 wait (h) of the window's jobs (not those carried
    in) overall and per group, utilization and fragmentation."""
    j = jobs.filter(pl.col("feasible") & ~pl.col("carried") & (pl.col("submit_s") < horizon)).with_columns(
        *(pl.col(c).fill_null(label) for c, label in GROUP_LABELS.items() if c in by),
        size_class_expr(pl.col("gpus")).alias("size_class"),
        (pl.col("wait_s").fill_null(horizon - pl.col("submit_s")) / 3600).alias("wait_h"))  # never started: censored
    rows = [("p50_wait_h", "all", j["wait_h"].quantile(0.5)), ("p95_wait_h", "all", j["wait_h"].quantile(0.95)),
            ("jobs", "all", float(j.height))]
    for col in by:
        g = j.group_by(col).agg(pl.col("wait_h").quantile(0.5).alias("p50"),
                                pl.col("wait_h").quantile(0.95).alias("p95"), pl.len().alias("n"))
        for key, p50, p95, n in g.iter_rows():
            scope = f"{col}={key}"
            rows += [("p50_wait_h", scope, p50), ("p95_wait_h", scope, p95), ("jobs", scope, float(n))]
    s = res.samples.filter(pl.col("t_s") < horizon)
    for scope, d in [("all", s)] + [(f"pool={p}", s.filter(pl.col("pool") == p))
                                    for p in sorted(set(s["pool"].to_list()))]:
        free = d["capacity_gpus"].sum() - d["allocated_gpus"].sum()
        rows.append(("utilization_pct", scope, _allocated_pct(d)))
        rows.append(("fragmentation_pct", scope, 100.0 * d["stranded_gpus"].sum() / free if free > 0 else 0.0))
    return pl.DataFrame(rows, schema={"metric": pl.Utf8, "scope": pl.Utf8, "value": pl.Float64}, orient="row")


def interval(values: np.ndarray, level: float = 0.95) -> tuple[float, float, float]:
    """Mean and t-interval of replication values (a single value: its own bounds)."""
    v = values[~np.isnan(values)]
    if v.size == 0:
        return float("nan"), float("nan"), float("nan")
    m = float(v.mean())
    if v.size < 2:
        return m, m, m
    h = float(stats.t.ppf(0.5 + level / 2, v.size - 1) * v.std(ddof=1) / np.sqrt(v.size))
    return m, m - h, m + h


def _stack(reps: list[pl.DataFrame]) -> pl.DataFrame:
    return pl.concat([r.with_columns(pl.lit(i).alias("rep")) for i, r in enumerate(reps)])


def _summarise(reps: list[pl.DataFrame]) -> pl.DataFrame:
    allm = _stack(reps)
    rows = []
    for (metric, scope), d in allm.group_by("metric", "scope", maintain_order=True):
        m, lo, hi = interval(d["value"].cast(pl.Float64).fill_null(np.nan).to_numpy())
        rows.append((metric, scope, m, max(lo, 0.0) if not np.isnan(lo) else lo, hi, d.height))
    return pl.DataFrame(rows, schema={"metric": pl.Utf8, "scope": pl.Utf8, "mean": pl.Float64,
                                      "ci_low": pl.Float64, "ci_high": pl.Float64, "replications": pl.Int64},
                        orient="row").pipe(_ordered)


def run_whatif(inp: Inputs, sc: Scenario, replications: int = 10, seed: int = 0,
               by: tuple[str, ...] = ("team", "size_class")) -> pl.DataFrame:
    """Metrics of a scenario with intervals: each replication bootstraps whole days of the observed
    workload (scaled by ``demand_scale``) and runs the simulator with its own seed.
    Columns: metric, scope (all / team=X / size_class=Y / pool=P), mean, ci_low, ci_high, replications."""
    return _summarise(_replications(inp, sc, replications, seed, by))


def _replications(inp: Inputs, sc: Scenario, replications: int, seed: int, by) -> list[pl.DataFrame]:
    horizon = inp.end_s
    reps = []
    for r in range(replications):
        jobs = sw.resample_days(inp.jobs, inp.days, sc.demand_scale, seed + r, inp.whole_days)
        res, out = _run(inp, sc, jobs, seed + r)
        reps.append(_metrics(res, out, horizon, list(by)))
    return reps


def compare(inp: Inputs, sc: Scenario, replications: int = 10, seed: int = 0,
            by: tuple[str, ...] = ("team", "size_class")) -> pl.DataFrame:
    """The scenario beside its :func:`baseline`, run with the same seeds and replications: the columns of
    :func:`run_whatif` (the scenario), then baseline, baseline_ci_low, baseline_ci_high and change,
    change_ci_low, change_ci_high: scenario - baseline per replication (paired by seed), its mean and 95 %
    t-interval. A metric/scope only one side has is empty on the other side."""
    base_sc = baseline(sc)
    reps = _replications(inp, sc, replications, seed, by)
    base = reps if base_sc == sc else _replications(inp, base_sc, replications, seed, by)
    both = _stack(reps).join(_stack(base), on=["metric", "scope", "rep"], how="full", coalesce=True,
                             suffix="_base").with_columns((pl.col("value") - pl.col("value_base")).alias("change"))
    rows = []
    for (metric, scope), d in both.group_by("metric", "scope", maintain_order=True):
        vals = {c: interval(d[c].cast(pl.Float64).fill_null(np.nan).to_numpy()) for c in ("value", "value_base",
                                                                                           "change")}
        m, lo, hi = vals["value"]
        bm, blo, bhi = vals["value_base"]
        rows.append((metric, scope, m, _floor0(lo), hi, int(d["value"].is_not_null().sum()), bm, _floor0(blo), bhi,
                     *vals["change"]))
    names = ["metric", "scope", "mean", "ci_low", "ci_high", "replications", "baseline", "baseline_ci_low",
             "baseline_ci_high", "change", "change_ci_low", "change_ci_high"]
    return pl.DataFrame(rows, orient="row", schema={n: pl.Utf8 if i < 2 else pl.Int64 if n == "replications"
                                                    else pl.Float64 for i, n in enumerate(names)}
                        ).pipe(_ordered)


def _ordered(df: pl.DataFrame) -> pl.DataFrame:
    """Rows by metric, then scope: all, pools, size classes smallest first (not "17-32" before "2-4"), teams."""
    kind = pl.col("scope").str.extract(r"^([a-z_]+)=", 1).fill_null("")
    return df.sort("metric", kind, size_order(pl.col("scope").str.replace(r"^size_class=", "")), "scope")


def _floor0(x: float) -> float:
    return x if np.isnan(x) else max(x, 0.0)


def replay(inp: Inputs, policy: Policy) -> tuple[SimResult, pl.DataFrame]:
    """The observed workload simulated on the observed capacity: the simulator's result and its per-job frame
    (with ``observed_wait_s`` and ``carried``)."""
    return _run(inp, Scenario(policy=policy), inp.jobs, policy.seed)


def replay_utilization_pct(inp: Inputs, res: SimResult) -> float:
    """Allocated over available GPUs (%) of a simulation over what the window measures, [start_s, end_s): the
    simulator samples the nodes that are up and not drained (the allocation ratio of docs/METRICS.md)."""
    pct = _allocated_pct(res.samples.filter(pl.col("t_s") < inp.end_s))
    return float("nan") if pct is None else pct


def _allocated_pct(samples: pl.DataFrame) -> float | None:
    """Allocated over available GPUs (%) of simulator samples; None with no capacity sampled."""
    cap = samples["capacity_gpus"].sum()
    return 100.0 * samples["allocated_gpus"].sum() / cap if cap else None


def observed_allocation_ratio_pct(con: duckdb.DuckDBPyConnection, inp: Inputs, cluster: str | None = None
                                  ) -> float | None:
    """What the replay's utilization is compared with: the observed allocation ratio (%) of what the window
    measures, [t0, t0 + end_s): `report utilization`'s allocated over available GPU-hours. None before a refresh
    (no timeline marts) or with no available GPU-hours."""
    if not has_table(con, "tl_clusters"):
        return None
    u = utilization.by_bucket(con, inp.t0, inp.t0 + timedelta(seconds=inp.end_s), "day", by=("cluster",))
    if cluster is not None and u.height:
        u = u.filter(pl.col("cluster") == cluster)
    avail = u["available_gpu_h"].sum() if u.height else 0.0
    return 100.0 * u["allocated_gpu_h"].sum() / avail if avail else None


def validate_replay(inp: Inputs, policy: Policy, replayed: tuple[SimResult, pl.DataFrame] | None = None
                    ) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Simulate the observed workload on the observed capacity; compare per-job waits.
    Returns (per-job frame, summary by size class: jobs, median / mean / p90 absolute error, p50 / p95 / mean
    observed and simulated, in hours). Waits count from eligibility (see ``sim_workload.load_jobs``). Compared:
    the window's jobs whose wait was observed (not those carried in, nor those still queued at the horizon).
    ``replayed``: :func:`replay`'s result for this policy when the caller has it already."""
    _, out = replayed or replay(inp, policy)
    j = out.filter(pl.col("feasible") & ~pl.col("carried") & pl.col("observed_wait_s").is_not_null()).with_columns(
        size_class_expr(pl.col("gpus")).alias("size_class"),
        (pl.col("observed_wait_s") / 3600).alias("observed_wait_h"),
        (pl.col("wait_s") / 3600).alias("simulated_wait_h"))
    j = j.with_columns((pl.col("simulated_wait_h") - pl.col("observed_wait_h")).abs().alias("abs_err_h"))

    def agg(d: pl.DataFrame, name: str):
        return (name, d.height, d["abs_err_h"].median(), d["abs_err_h"].mean(), d["abs_err_h"].quantile(0.9),
                d["observed_wait_h"].quantile(0.5), d["simulated_wait_h"].quantile(0.5),
                d["observed_wait_h"].quantile(0.95), d["simulated_wait_h"].quantile(0.95),
                d["observed_wait_h"].mean(), d["simulated_wait_h"].mean())
    order = list(SIZE_CLASSES)
    rows = [agg(j, "all")] + [agg(j.filter(pl.col("size_class") == c), c) for c in order
                              if j.filter(pl.col("size_class") == c).height]
    summary = pl.DataFrame(rows, schema={"size_class": pl.Utf8, "jobs": pl.Int64, "median_abs_err_h": pl.Float64,
                                         "mean_abs_err_h": pl.Float64, "p90_abs_err_h": pl.Float64,
                                         "observed_p50_h": pl.Float64, "simulated_p50_h": pl.Float64,
                                         "observed_p95_h": pl.Float64, "simulated_p95_h": pl.Float64,
                                         "observed_mean_h": pl.Float64, "simulated_mean_h": pl.Float64},
                           orient="row")
    return j, summary


def plan_capacity(inp: Inputs, pool: str, target_p95_h: float, sc: Scenario | None = None,
                  grid: list[int] | None = None, replications: int = 5, seed: int = 0
                  ) -> tuple[pl.DataFrame, dict | None]:
    """Sweep the number of nodes of ``pool`` over a grid (backfill is not monotone in capacity, so no
    bisection) and return (grid table, answer). The answer is the smallest node count from which every
    larger grid point also meets the target on the replication mean of the p95 wait (hours) of the pool's own
    jobs (typed to it, or run on it): the other pools' waits do not depend on this pool's size, and a target
    on the overall p95 would put out of reach whatever a congested other pool makes it. Its interval is
    reported. Scenario fields other than capacity (demand, run time, policy) apply to every point."""
    sc = sc or Scenario()
    if pool not in inp.cluster.pools:
        raise ValueError(f"unknown pool {pool!r}; pools: {', '.join(inp.cluster.pools)}")
    n0 = int((inp.cluster.node_pool == inp.cluster.pools.index(pool)).sum())
    per_node = float(np.median(inp.cluster.node_gpus[inp.cluster.node_pool == inp.cluster.pools.index(pool)]))
    if grid is None:
        hi = max(2 * n0, n0 + 4)
        grid = sorted({max(1, int(round(x))) for x in np.linspace(max(1, n0 // 2), hi, 13)})
    rows = []
    for n in grid:
        d = n - n0
        s2 = replace(sc, add={**sc.add, pool: d} if d > 0 else dict(sc.add),
                     remove={**sc.remove, pool: -d} if d < 0 else dict(sc.remove))
        m = run_whatif(inp, s2, replications, seed, by=("pool",)).filter(pl.col("scope") == f"pool={pool}")
        p95 = m.filter(pl.col("metric") == "p95_wait_h")
        if p95.height == 0:
            raise ValueError(f"no {pool} jobs in the window to plan for")
        p95 = p95.row(0, named=True)
        util = m.filter(pl.col("metric") == "utilization_pct")
        rows.append((n, n * per_node, p95["mean"], p95["ci_low"], p95["ci_high"],
                     util["mean"][0] if util.height else None))
    table = pl.DataFrame(rows, schema={"nodes": pl.Int64, "gpus": pl.Float64, "p95_wait_h": pl.Float64,
                                       "ci_low": pl.Float64, "ci_high": pl.Float64,
                                       "pool_utilization_pct": pl.Float64}, orient="row")
    meets = (table["p95_wait_h"] <= target_p95_h).to_list()
    answer = None
    for i in range(len(meets)):
        if all(meets[i:]):
            r = table.row(i, named=True)
            answer = {**r, "pool": pool, "current_nodes": n0, "target_p95_wait_h": target_p95_h,
                      "meets_with_confidence": r["ci_high"] <= target_p95_h}
            break
    return table.with_columns(pl.Series("meets_target", meets)), answer
