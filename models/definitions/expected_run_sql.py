"""A job's expected run time while it has not finished, defined once: the demand series count it for the work
still queued or running at the horizon (models/kernels/demand_measures.py), and the simulator's workload runs
such a job for it (models/simulation/workload.py). Definition: docs/FORECAST.md ("Which series answers what").
"""
from __future__ import annotations


def expected_run_ctes(runs: str, todo: str) -> str:
    """The body of a WITH clause (no leading WITH, no trailing comma) whose last CTE is
    ``expected(job_uid, est_s)``: seconds a job not finished is expected to run in all, given ``ran_s`` seconds
    run by the horizon (0 while pending). It is the mean of the finished runs of its partition (the first it
    lists: a pending job may list several) that lasted at least ``ran_s``, else of its cluster's, else its time
    limit; never above its time limit (NULL when neither runs nor a limit are known).

    ``runs``: a relation of finished runs with columns cluster, partition ('' when none), elapsed_s (seconds).
    ``todo``: a relation of the jobs not finished: job_uid, cluster, partition ('' when none), ran_s, timelimit_s.
    The runs shorter than ``ran_s`` are taken out by whole minutes (a running sum over minutes, not over runs:
    a window over millions of runs is slow) and then within the job's own minute."""
    return f"""
_xr_runs AS (  -- finished run times per partition (lvl 0) and per cluster (lvl 1)
    SELECT cluster, l.lvl, CASE l.lvl WHEN 0 THEN partition ELSE '' END AS pk, elapsed_s
    FROM ({runs}) r, (VALUES (0), (1)) l(lvl)
), _xr_dist AS (SELECT cluster, lvl, pk, elapsed_s, count(*) AS c, sum(elapsed_s) AS s FROM _xr_runs GROUP BY ALL
), _xr_nfin AS (SELECT cluster, lvl, pk, sum(c) AS n, sum(s) AS total FROM _xr_dist GROUP BY ALL
), _xr_mins AS (   -- count and sum of the runs up to each whole minute
    SELECT cluster, lvl, pk, m, sum(c) OVER w AS le, sum(s) OVER w AS se
    FROM (SELECT cluster, lvl, pk, floor(elapsed_s / 60) AS m, sum(c) AS c, sum(s) AS s FROM _xr_dist GROUP BY ALL)
    WINDOW w AS (PARTITION BY cluster, lvl, pk ORDER BY m ROWS UNBOUNDED PRECEDING)
), _xr_open AS ({todo}
), _xr_todo AS (   -- the jobs not finished, at both levels
    SELECT t.job_uid, t.cluster, l.lvl, CASE l.lvl WHEN 0 THEN split_part(t.partition, ',', 1) ELSE '' END AS pk,
           t.ran_s AS ran
    FROM _xr_open t, (VALUES (0), (1)) l(lvl)
), _xr_part AS (   -- the runs shorter than it has run in its own minute (at most 60 distinct run times)
    SELECT t.job_uid, t.lvl, sum(d.c) AS c, sum(d.s) AS s
    FROM _xr_todo t JOIN _xr_dist d ON d.cluster = t.cluster AND d.lvl = t.lvl AND d.pk = t.pk
                                   AND floor(d.elapsed_s / 60) = floor(t.ran / 60)
    WHERE t.ran > 0 AND d.elapsed_s < t.ran GROUP BY ALL
), _xr_shorter AS ( -- the runs shorter than it has run: the whole minutes before its own, then its own minute's
    SELECT t.job_uid, t.lvl, coalesce(f.le, 0) + coalesce(p.c, 0) AS k0, coalesce(f.se, 0) + coalesce(p.s, 0) AS s0
    FROM _xr_todo t ASOF LEFT JOIN _xr_mins f ON f.cluster = t.cluster AND f.lvl = t.lvl AND f.pk = t.pk
                                             AND floor(t.ran / 60) > f.m
    LEFT JOIN _xr_part p ON p.job_uid = t.job_uid AND p.lvl = t.lvl
), _xr_cmean AS (  -- the mean of the finished runs at least as long as it has run: the shorter ones taken out
    SELECT t.job_uid, t.lvl, (n.total - s.s0) / (n.n - s.k0) AS mean_s
    FROM _xr_todo t JOIN _xr_nfin n USING (cluster, lvl, pk)
    JOIN _xr_shorter s ON s.job_uid = t.job_uid AND s.lvl = t.lvl
    WHERE n.n > s.k0
), expected AS (
    SELECT t.job_uid, CASE WHEN coalesce(m.mean_s, c.mean_s, t.timelimit_s) IS NOT NULL   -- least skips NULLs
        THEN least(coalesce(t.timelimit_s, 1e18), coalesce(m.mean_s, c.mean_s, t.timelimit_s)) END::DOUBLE AS est_s
    FROM _xr_open t LEFT JOIN _xr_cmean m ON m.job_uid = t.job_uid AND m.lvl = 0
    LEFT JOIN _xr_cmean c ON c.job_uid = t.job_uid AND c.lvl = 1
)"""
