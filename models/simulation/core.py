"""The discrete-event scheduler kernel (numba). Use it through ``models.simulate.simulate``.

Everything here works on flat numpy arrays so the loop compiles to machine code: a binary heap of
completions, a sorted array of running jobs by expected end (start + time limit) for EASY reservations,
the pending queue as a slice of an array, and per-node free GPUs (float, so GPU-sharing fractions work).
Times are seconds on the caller's clock; GPUs are counts (fractions allowed).
"""
from __future__ import annotations

import numpy as np
from numba import njit

EPS = 1e-9
INF = np.inf

# integer parameters (ip)
IP_QUEUE, IP_BACKFILL, IP_BF_DEPTH, IP_PLACEMENT, IP_SEED, IP_REQUEUE = range(6)
# float parameters (fp)
(FP_W_AGE, FP_W_FS, FP_W_QOS, FP_W_SIZE, FP_MAX_AGE, FP_HALF_LIFE, FP_PRIO_PERIOD,
 FP_SAMPLE_DT, FP_SAMPLE_T0, FP_SAMPLE_T1, FP_TOTAL_GPUS, FP_BF_INTERVAL) = range(12)

QUEUE_FIFO, QUEUE_PRIORITY = 0, 1
PLACE_FIRST_FIT, PLACE_BEST_FIT, PLACE_RANDOM, PLACE_FGD = 0, 1, 2, 3
EV_DRAIN, EV_DOWN, EV_UP, EV_MARK = 0, 1, 2, 3   # EV_MARK: an advance reservation starts or ends (a pass runs)
RESV_NONE, RESV_EXEMPT = -1, -2                  # a job's advance reservation: none, or not bound by any


# ---------------------------------------------------------------- completion heap (time, job, run#)

@njit(cache=True)
def _heap_push(ht, hj, hr, n, t, j, r):
    i = n
    ht[i] = t
    hj[i] = j
    hr[i] = r
    while i > 0:
        p = (i - 1) >> 1
        if ht[p] <= ht[i]:
            break
        ht[p], ht[i] = ht[i], ht[p]
        hj[p], hj[i] = hj[i], hj[p]
        hr[p], hr[i] = hr[i], hr[p]
        i = p
    return n + 1


@njit(cache=True)
def _grow(a):
    b = np.empty(2 * a.size, a.dtype)
    b[:a.size] = a
    return b


@njit(cache=True)
def _heap_pop(ht, hj, hr, n):
    n -= 1
    ht[0] = ht[n]
    hj[0] = hj[n]
    hr[0] = hr[n]
    i = 0
    while True:
        lft = 2 * i + 1
        if lft >= n:
            break
        c = lft
        if lft + 1 < n and ht[lft + 1] < ht[lft]:
            c = lft + 1
        if ht[i] <= ht[c]:
            break
        ht[c], ht[i] = ht[i], ht[c]
        hj[c], hj[i] = hj[i], hj[c]
        hr[c], hr[i] = hr[i], hr[c]
        i = c
    return n


# ---------------------------------------------------------------- running jobs sorted by expected end

@njit(cache=True)
def _rs_insert(rs_t, rs_j, n, t, j):
    pos = np.searchsorted(rs_t[:n], t, side="right")
    if pos < n:
        rs_t[pos + 1:n + 1] = rs_t[pos:n].copy()
        rs_j[pos + 1:n + 1] = rs_j[pos:n].copy()
    rs_t[pos] = t
    rs_j[pos] = j
    return n + 1


@njit(cache=True)
def _rs_remove(rs_t, rs_j, n, t, j):
    pos = np.searchsorted(rs_t[:n], t, side="left")
    while pos < n and rs_j[pos] != j:
        pos += 1
    if pos >= n:  # not found by key (should not happen): linear fallback
        pos = 0
        while pos < n and rs_j[pos] != j:
            pos += 1
        if pos >= n:
            return n
    rs_t[pos:n - 1] = rs_t[pos + 1:n].copy()
    rs_j[pos:n - 1] = rs_j[pos + 1:n].copy()
    return n - 1


# ---------------------------------------------------------------- placement

@njit(cache=True)
def _frag(f, mix_size, mix_prob):
    """Workload-weighted stranded GPUs of a node with f free: sum_s p_s * f * [f < s] (METRICS §1.2)."""
    s = 0.0
    for i in range(mix_size.size):
        if f < mix_size[i] - EPS:
            s += mix_prob[i]
    return s * f


PM_FREE, PM_BACKFILL, PM_RESERVE = 0, 1, 2


@njit(cache=True)
def _resv_ok(n, now, t_end, jr, aw):
    """May a job of advance reservation ``jr`` hold node ``n`` from ``now`` to ``t_end`` (its limit)?

    ``aw`` = (ptr, start, end, id, cursor): each node's reservation windows sorted by start (CSR by node), and per
    node the first window not yet over (advanced here; time only moves forward). A job in no reservation may not
    hold a node into a window (Slurm starts no job whose limit reaches into a reservation of its nodes); a
    reservation's job only its reservation's nodes while it is active. RESV_EXEMPT jobs (running when the window
    starts) are not bound."""
    if jr == RESV_EXEMPT:
        return True
    ptr, ws, we, wid, cur = aw
    w = cur[n]
    hi = ptr[n + 1]
    while w < hi and we[w] <= now:
        w += 1
    cur[n] = w
    if jr < 0:
        return w >= hi or ws[w] >= t_end
    while w < hi and ws[w] <= now:   # overlapping windows (Slurm's OVERLAP flag): any of them may be the job's
        if wid[w] == jr and we[w] > now:
            return True
        w += 1
    return False


@njit(cache=True)
def _place(nodes, free, up, extra, nshadow, mode, now, t_end, jr, aw, g, k, policy, mix_size, mix_prob, cand, score,
           sel):
    """Choose k distinct nodes from ``nodes`` with capacity >= g for a job of advance reservation ``jr`` held from
    ``now`` to ``t_end``; write them to sel[:k]. Returns success.

    Capacity is the node's free GPUs, except: PM_BACKFILL, a job running past a node's reservation
    (t_end > nshadow) may only use the GPUs that reservation does not need (``extra``); PM_RESERVE, nodes
    already reserved for an earlier head are not candidates (``free`` is then the projected free GPUs). Nodes
    an advance reservation keeps from the job (``_resv_ok``) are not candidates."""
    nc = 0
    best = -1
    best_s = INF
    windows = aw[1].size > 0
    for idx in range(nodes.size):
        n = nodes[idx]
        if not up[n]:
            continue
        # (a node whose windows are all over, as most are, needs no call; a reservation's job needs its window)
        if windows and (jr >= 0 or aw[4][n] < aw[0][n + 1]) and not _resv_ok(n, now, t_end, jr, aw):
            continue
        c = free[n]
        if mode == PM_BACKFILL:
            if t_end > nshadow[n] and extra[n] < c:
                c = extra[n]
        elif mode == PM_RESERVE and nshadow[n] < INF:
            continue
        if c < g - EPS:
            continue
        if policy == PLACE_FIRST_FIT:
            s = float(nc)
        elif policy == PLACE_BEST_FIT:
            s = c - g
        elif policy == PLACE_RANDOM:
            s = np.random.random()
        else:
            s = _frag(free[n] - g, mix_size, mix_prob) - _frag(free[n], mix_size, mix_prob)
        cand[nc] = n
        score[nc] = s
        if s < best_s:
            best_s = s
            best = n
        nc += 1
        if policy == PLACE_FIRST_FIT and nc >= k:
            break
    if nc < k:
        return False
    if k == 1:
        sel[0] = best
        return True
    order = np.argsort(score[:nc], kind="mergesort")
    for i in range(k):
        sel[i] = cand[order[i]]
    return True


# ---------------------------------------------------------------- the simulation

@njit(cache=True)
def simulate_kernel(node_gpus, node_up0, node_pool, n_pools, cls_ptr, cls_nodes,
                    submit, qfrom, run, limit, gpn, nnodes, jcls, acct, qosf, feasible, jresv, jcap, aw, cls_wspan,
                    ev_time, ev_node, ev_kind, acct_shares, mix_size, mix_prob, ip, fp,
                    first_start, start, end, alloc_ptr, alloc_node, nreq, head_shadow,
                    samp_t, samp_cap, samp_alloc, samp_strand, samp_queue):
    """Run the whole simulation. Outputs are written into the arrays passed in.

    Advance reservations: ``jresv`` each job's (index, RESV_NONE or RESV_EXEMPT), ``jcap`` when it is killed
    wherever it started (its reservation's end + ResvOverRun; inf: never), ``aw`` the nodes' windows (see
    ``_resv_ok``), ``cls_wspan`` per class the [from, to) in which its jobs' fit depends on their limits.

    Returns (number of scheduling passes, number of samples written)."""
    N = node_gpus.size
    J = submit.size
    E = ev_time.size
    qpol = ip[IP_QUEUE]
    backfill = ip[IP_BACKFILL] != 0
    bf_depth = ip[IP_BF_DEPTH]
    policy = ip[IP_PLACEMENT]
    requeue = ip[IP_REQUEUE] != 0
    np.random.seed(ip[IP_SEED])
    total_gpus = fp[FP_TOTAL_GPUS]
    bf_interval = fp[FP_BF_INTERVAL]
    last_bf = -INF
    t_bf = INF                     # a deferred backfill pass (Slurm's bf_interval timer), INF = none due
    n_cls = cls_ptr.size - 1
    n_acct = acct_shares.size

    free = node_gpus.copy()
    pf = node_gpus.copy()          # projected free, scratch for reservations (kept equal to free outside)
    extra = np.full(N, INF)        # per-node GPUs a job outlasting the node's reservation may take
    nshadow = np.full(N, INF)      # per-node reservation start (INF = no reservation on the node)
    member = np.zeros(N, np.int64)  # eligibility stamp used by _reserve
    down = np.zeros(N, np.int64)
    for n in range(N):
        if not node_up0[n]:
            down[n] = 1
    up = node_up0.copy()
    total_free = 0.0
    for n in range(N):
        if up[n]:
            total_free += free[n]

    state = np.zeros(J, np.int64)  # 0 future, 1 pending, 2 running, 3 done, 4 never
    runno = np.zeros(J, np.int64)
    qcap = 2 * J + 16
    q = np.empty(qcap, np.int64)
    qp = np.zeros(qcap)
    q_lo = 0
    q_hi = 0
    hcap = J + 16
    ht = np.empty(hcap)
    hj = np.empty(hcap, np.int64)
    hr = np.empty(hcap, np.int64)
    hn = 0
    rs_t = np.empty(J + 1)
    rs_j = np.empty(J + 1, np.int64)
    rn = 0
    cand = np.empty(N, np.int64)
    score = np.empty(N)
    sel = np.empty(N, np.int64)
    touched = np.empty(N, np.int64)
    tmark = np.zeros(N, np.bool_)
    resv = np.empty(N, np.int64)
    stamp = np.zeros(1, np.int64)
    # per-class queue bookkeeping: pending jobs per eligibility class, classes blocked in this pass, heads
    qcount = np.zeros(n_cls, np.int64)
    n_pend_cls = 0
    blocked = np.zeros(n_cls, np.bool_)
    heads = np.empty(n_cls, np.int64)
    is_head = np.zeros(J, np.bool_)
    # fair share
    usage = np.zeros(n_acct)
    usage_pend = np.zeros(n_acct)  # GPU-seconds of jobs that started/ended since the last recalculation
    run_gpus = np.zeros(n_acct)
    fsf = np.ones(n_acct)
    last_recalc = -INF
    # per-pass failure cache: smallest g that failed on one node, per class and capacity mode; while an advance
    # reservation makes the fit depend on the job's limit (cls_wspan), also the failed job's end by its limit
    # (a job asking as much or more and ending as late or later fails too), else -inf
    fail1 = np.full((n_cls, 2), INF)
    fail1_t = np.full((n_cls, 2), INF)
    failk_k = np.full((n_cls, 2), 1 << 30)
    failk_g = np.full((n_cls, 2), INF)
    failk_t = np.full((n_cls, 2), INF)

    w_age = fp[FP_W_AGE]
    w_fs = fp[FP_W_FS]
    w_qos = fp[FP_W_QOS]
    w_size = fp[FP_W_SIZE]
    max_age = fp[FP_MAX_AGE]
    half_life = fp[FP_HALF_LIFE]
    prio_period = fp[FP_PRIO_PERIOD]
    sdt = fp[FP_SAMPLE_DT]
    ts_next = fp[FP_SAMPLE_T0]
    ts_end = fp[FP_SAMPLE_T1]
    n_samp = 0
    max_samp = samp_t.size

    ja = 0
    je = 0
    passes = 0
    dirty = False

    while True:
        t_arr = submit[ja] if ja < J else INF
        t_cmp = ht[0] if hn > 0 else INF
        t_ev = ev_time[je] if je < E else INF
        now = min(t_arr, t_cmp, t_ev, t_bf)
        # fixed-interval samples: the state during [ts, ts + dt) (events at ts already applied)
        while sdt > 0 and ts_next < now and ts_next < ts_end and n_samp < max_samp:
            samp_t[n_samp] = ts_next
            for n in range(N):
                if up[n]:
                    p = node_pool[n]
                    samp_cap[n_samp, p] += node_gpus[n]
                    samp_alloc[n_samp, p] += node_gpus[n] - free[n]
                    samp_strand[n_samp, p] += _frag(free[n], mix_size, mix_prob)
            qd = 0.0
            for i in range(q_lo, q_hi):
                jj = q[i]
                qd += gpn[jj] * nnodes[jj]
            samp_queue[n_samp] = qd
            n_samp += 1
            ts_next += sdt

        if now == INF:
            break  # nothing more can happen; jobs still queued stay pending (never started)
        # completions
        while hn > 0 and ht[0] <= now:
            j = hj[0]
            r = hr[0]
            hn = _heap_pop(ht, hj, hr, hn)
            if state[j] != 2 or runno[j] != r:
                continue  # stale entry of a job killed by a node failure
            g = gpn[j]
            for a in range(alloc_ptr[j], alloc_ptr[j] + nnodes[j]):
                n = alloc_node[a]
                free[n] += g
                pf[n] = free[n]
                if up[n]:
                    total_free += g
            rn = _rs_remove(rs_t, rs_j, rn, start[j] + limit[j], j)
            run_gpus[acct[j]] -= g * nnodes[j]
            if qpol == QUEUE_PRIORITY:
                usage_pend[acct[j]] += g * nnodes[j] * (now - last_recalc)
            state[j] = 3
            end[j] = now
            dirty = True
        # node events
        while je < E and ev_time[je] <= now:
            n = ev_node[je]
            kind = ev_kind[je]
            je += 1
            if kind == EV_MARK:
                dirty = True
                continue
            if kind == EV_UP:
                if down[n] > 0:
                    down[n] -= 1
                    if down[n] == 0:
                        up[n] = True
                        total_free += free[n]
                        dirty = True
                continue
            down[n] += 1
            if down[n] == 1:
                up[n] = False
                total_free -= free[n]
            if kind == EV_DOWN and requeue:
                i = 0
                while i < rn:
                    j = rs_j[i]
                    hit = False
                    for a in range(alloc_ptr[j], alloc_ptr[j] + nnodes[j]):
                        if alloc_node[a] == n:
                            hit = True
                    if not hit:
                        i += 1
                        continue
                    g = gpn[j]
                    for a in range(alloc_ptr[j], alloc_ptr[j] + nnodes[j]):
                        m = alloc_node[a]
                        free[m] += g
                        pf[m] = free[m]
                        if up[m]:
                            total_free += g
                    rn = _rs_remove(rs_t, rs_j, rn, rs_t[i], j)
                    run_gpus[acct[j]] -= g * nnodes[j]
                    if qpol == QUEUE_PRIORITY:
                        usage_pend[acct[j]] += g * nnodes[j] * (now - last_recalc)
                    state[j] = 1
                    runno[j] += 1
                    nreq[j] += 1
                    # back into the queue at its original submit order (FIFO) or by priority
                    if q_hi >= qcap:
                        q[0:q_hi - q_lo] = q[q_lo:q_hi].copy()
                        qp[0:q_hi - q_lo] = qp[q_lo:q_hi].copy()
                        q_hi -= q_lo
                        q_lo = 0
                    if qpol == QUEUE_FIFO:
                        pos = q_lo + np.searchsorted(q[q_lo:q_hi], j)
                    else:
                        pos = q_hi
                    q[pos + 1:q_hi + 1] = q[pos:q_hi].copy()
                    qp[pos + 1:q_hi + 1] = qp[pos:q_hi].copy()
                    q[pos] = j
                    qp[pos] = INF if qpol == QUEUE_PRIORITY else 0.0
                    q_hi += 1
                    qcount[jcls[j]] += 1
                    if qcount[jcls[j]] == 1:
                        n_pend_cls += 1
                    dirty = True
        # arrivals
        while ja < J and submit[ja] <= now:
            j = ja
            ja += 1
            if not feasible[j]:
                state[j] = 4
                continue
            state[j] = 1
            qcount[jcls[j]] += 1
            if qcount[jcls[j]] == 1:
                n_pend_cls += 1
            if q_hi >= qcap:
                q[0:q_hi - q_lo] = q[q_lo:q_hi].copy()
                qp[0:q_hi - q_lo] = qp[q_lo:q_hi].copy()
                q_hi -= q_lo
                q_lo = 0
            if qpol == QUEUE_FIFO:
                q[q_hi] = j
                q_hi += 1
            else:
                pr = w_fs * fsf[acct[j]] + w_qos * qosf[j] + w_size * (gpn[j] * nnodes[j] / total_gpus)
                pos = q_hi
                while pos > q_lo and qp[pos - 1] < pr:
                    pos -= 1
                q[pos + 1:q_hi + 1] = q[pos:q_hi].copy()
                qp[pos + 1:q_hi + 1] = qp[pos:q_hi].copy()
                q[pos] = j
                qp[pos] = pr
                q_hi += 1
            dirty = True

        if now >= t_bf:
            t_bf = INF
            dirty = True
        if not dirty or q_hi == q_lo:
            continue
        dirty = False
        passes += 1

        # ---- priorities (Slurm multifactor), recomputed every prio_period like PriorityCalcPeriod
        if qpol == QUEUE_PRIORITY and now - last_recalc >= prio_period:
            if last_recalc > -INF:
                dt = now - last_recalc
                decay = 0.5 ** (dt / half_life) if half_life > 0 else 1.0
                for a in range(n_acct):
                    usage[a] = usage[a] * decay + run_gpus[a] * dt + usage_pend[a]
                    usage_pend[a] = 0.0
            tot_u = usage.sum()
            for a in range(n_acct):
                u = usage[a] / tot_u if tot_u > 0 else 0.0
                s = acct_shares[a] if acct_shares[a] > 0 else 1e-9
                fsf[a] = 2.0 ** (-u / s)
            last_recalc = now
            m = q_hi - q_lo
            for i in range(q_lo, q_hi):
                jj = q[i]
                age = (now - qfrom[jj]) / max_age if max_age > 0 else 0.0   # queued since (<= submit)
                if age > 1.0:
                    age = 1.0
                qp[i] = (w_age * age + w_fs * fsf[acct[jj]] + w_qos * qosf[jj]
                         + w_size * (gpn[jj] * nnodes[jj] / total_gpus))
            order = np.argsort(-qp[q_lo:q_hi], kind="mergesort")
            qq = q[q_lo:q_hi].copy()
            qpp = qp[q_lo:q_hi].copy()
            for i in range(m):
                q[q_lo + i] = qq[order[i]]
                qp[q_lo + i] = qpp[order[i]]

        for c in range(n_cls):
            fail1[c, 0] = INF
            fail1[c, 1] = INF
            fail1_t[c, 0] = INF
            fail1_t[c, 1] = INF
            failk_k[c, 0] = 1 << 30
            failk_k[c, 1] = 1 << 30
            blocked[c] = False

        # ---- main pass, as Slurm's main scheduler: jobs in queue order; a job that does not fit blocks its
        # eligibility class (later jobs of that class wait; other classes go on) and becomes the class's head
        nh = 0
        i = q_lo
        while i < q_hi and nh < n_pend_cls:
            j = q[i]
            if j < 0:
                i += 1
                continue
            c = jcls[j]
            if blocked[c]:
                i += 1
                continue
            g = gpn[j]
            k = nnodes[j]
            ok = False
            if g * k <= total_free + EPS:
                ok = _place(cls_nodes[cls_ptr[c]:cls_ptr[c + 1]], free, up, extra, nshadow, PM_FREE, now,
                            now + limit[j], jresv[j], aw, g, k, policy, mix_size, mix_prob, cand, score, sel)
            if not ok:
                blocked[c] = True
                heads[nh] = j
                is_head[j] = True
                nh += 1
                i += 1
                continue
            _start(j, now, sel, free, pf, up, gpn, nnodes, run, limit, alloc_ptr, alloc_node, start,
                   first_start, state, runno, acct, run_gpus)
            if qpol == QUEUE_PRIORITY:
                usage_pend[acct[j]] -= g * k * (now - last_recalc)
            total_free -= g * k
            if hn >= ht.size:
                ht, hj, hr = _grow(ht), _grow(hj), _grow(hr)
            hn = _heap_push(ht, hj, hr, hn, min(now + run[j], jcap[j]), j, runno[j])
            rn = _rs_insert(rs_t, rs_j, rn, now + limit[j], j)
            q[i] = -1
            qcount[c] -= 1
            if qcount[c] == 0:
                n_pend_cls -= 1
            i += 1
        scan_end = i

        run_bf = nh > 0 and backfill
        if run_bf and now < last_bf + bf_interval:
            # backfill runs every bf_interval seconds, not at every event: come back then
            run_bf = False
            if t_bf == INF and min(t_arr, t_cmp, t_ev) < INF:
                t_bf = last_bf + bf_interval
        if run_bf:
            last_bf = now
            # ---- EASY backfill: each blocked class's head gets a reservation at its shadow time on specific
            # nodes (nodes already reserved for an earlier head are not reused); a later job may start now if
            # on every node it takes it ends (by its limit) before that node's reservation, or uses only GPUs
            # the reservation does not need.
            nres = 0
            min_sh = INF
            max_sh = -INF
            for h in range(nh):
                head = heads[h]
                hc = jcls[head]
                shadow, nr = _reserve(head, now, gpn[head], nnodes[head], limit[head], jresv[head], aw,
                                      cls_nodes[cls_ptr[hc]:cls_ptr[hc + 1]],
                                      free, pf, up, extra, nshadow, member, stamp, rs_t, rs_j, rn, gpn, nnodes,
                                      alloc_ptr, alloc_node, policy, mix_size, mix_prob, cand, score, sel, touched,
                                      tmark, resv[nres:])
                nres += nr
                if shadow < INF:
                    if head_shadow[head] < 0 or shadow < head_shadow[head]:
                        head_shadow[head] = shadow
                    if nr > 0:
                        min_sh = min(min_sh, shadow)
                        max_sh = max(max_sh, shadow)
            i = q_lo
            scanned = 0
            while i < q_hi and scanned < bf_depth and total_free > EPS:
                j = q[i]
                if j < 0 or is_head[j]:
                    i += 1
                    continue
                scanned += 1
                g = gpn[j]
                k = nnodes[j]
                c = jcls[j]
                t_end = now + limit[j]
                # failure cache only where the constraint is the same for every reserved node
                mode = 0 if t_end <= min_sh else (1 if t_end > max_sh else 2)
                t_key = t_end if cls_wspan[c, 0] <= now < cls_wspan[c, 1] else -INF
                if g * k > total_free + EPS or (mode < 2 and ((k == 1 and g >= fail1[c, mode]
                                                              and t_key >= fail1_t[c, mode])
                                                             or (k > 1 and k >= failk_k[c, mode]
                                                                 and g >= failk_g[c, mode]
                                                                 and t_key >= failk_t[c, mode]))):
                    i += 1
                    continue
                ok = _place(cls_nodes[cls_ptr[c]:cls_ptr[c + 1]], free, up, extra, nshadow, PM_BACKFILL, now, t_end,
                            jresv[j], aw, g, k, policy, mix_size, mix_prob, cand, score, sel)
                if not ok:
                    if mode < 2:
                        if k == 1:
                            if g < fail1[c, mode] and t_key <= fail1_t[c, mode]:
                                fail1[c, mode] = g
                                fail1_t[c, mode] = t_key
                        else:
                            failk_k[c, mode] = k
                            failk_g[c, mode] = g
                            failk_t[c, mode] = t_key
                    i += 1
                    continue
                _start(j, now, sel, free, pf, up, gpn, nnodes, run, limit, alloc_ptr, alloc_node, start,
                       first_start, state, runno, acct, run_gpus)
                if qpol == QUEUE_PRIORITY:
                    usage_pend[acct[j]] -= g * k * (now - last_recalc)
                total_free -= g * k
                for s in range(k):
                    if t_end > nshadow[sel[s]]:
                        extra[sel[s]] -= g
                if hn >= ht.size:
                    ht, hj, hr = _grow(ht), _grow(hj), _grow(hr)
                hn = _heap_push(ht, hj, hr, hn, min(now + run[j], jcap[j]), j, runno[j])
                rn = _rs_insert(rs_t, rs_j, rn, t_end, j)
                q[i] = -1
                qcount[c] -= 1
                if qcount[c] == 0:
                    n_pend_cls -= 1
                i += 1
            if i > scan_end:
                scan_end = i
            for r in range(nres):
                extra[resv[r]] = INF
                nshadow[resv[r]] = INF
        for h in range(nh):
            is_head[heads[h]] = False
        # pack the survivors of [q_lo, scan_end) to the right, keeping their order
        w = scan_end - 1
        for rd in range(scan_end - 1, q_lo - 1, -1):
            if q[rd] >= 0:
                q[w] = q[rd]
                qp[w] = qp[rd]
                w -= 1
        q_lo = w + 1

    return passes, n_samp


@njit(cache=True)
def _start(j, now, sel, free, pf, up, gpn, nnodes, run, limit, alloc_ptr, alloc_node, start, first_start,
           state, runno, acct, run_gpus):
    g = gpn[j]
    k = nnodes[j]
    for s in range(k):
        n = sel[s]
        free[n] -= g
        pf[n] = free[n]
        alloc_node[alloc_ptr[j] + s] = n
    start[j] = now
    if first_start[j] != first_start[j]:  # NaN: first time this job starts
        first_start[j] = now
    state[j] = 2
    run_gpus[acct[j]] += g * k


@njit(cache=True)
def _reserve(head, now, hg, hk, hlim, hr, aw, nodes, free, pf, up, extra, nshadow, member, stamp, rs_t, rs_j, rn,
             gpn, nnodes, alloc_ptr, alloc_node, policy, mix_size, mix_prob, cand, score, sel, touched, tmark, resv):
    """Reservation of a blocked head: its shadow time -- walk running jobs by expected end (start + limit)
    until hk eligible, not yet reserved nodes have >= hg projected free GPUs -- and the nodes it would take
    then. Sets ``nshadow`` and ``extra`` on those nodes; returns (shadow, n_reserved). Nodes that are down
    are not counted on (their return time is unknown to the scheduler), nor nodes an advance reservation keeps
    from the head if it started now (``_resv_ok`` with its limit ``hlim``; the head of an advance reservation
    gets a shadow only while it is active), and the nodes are chosen for a start at the shadow time."""
    stamp[0] += 1
    st = stamp[0]
    windows = aw[1].size > 0
    for idx in range(nodes.size):
        n = nodes[idx]
        if not windows or _resv_ok(n, now, now + hlim, hr, aw):
            member[n] = st
    nt = 0
    fit = 0
    for idx in range(nodes.size):
        n = nodes[idx]
        if member[n] == st and up[n] and nshadow[n] == INF and pf[n] >= hg - EPS:
            fit += 1
    shadow = INF
    if fit >= hk:
        shadow = now
    else:
        for i in range(rn):
            j = rs_j[i]
            g = gpn[j]
            for a in range(alloc_ptr[j], alloc_ptr[j] + nnodes[j]):
                n = alloc_node[a]
                if member[n] != st or not up[n] or nshadow[n] < INF:
                    continue
                before = pf[n] >= hg - EPS
                pf[n] += g
                if not tmark[n]:
                    tmark[n] = True
                    touched[nt] = n
                    nt += 1
                if not before and pf[n] >= hg - EPS:
                    fit += 1
            if fit >= hk:
                shadow = rs_t[i]
                break
    nres = 0
    if shadow < INF:
        ok = _place(nodes, pf, up, extra, nshadow, PM_RESERVE, now, shadow + hlim, hr, aw, hg, hk, policy, mix_size,
                    mix_prob, cand, score, sel)
        if ok:
            for s in range(hk):
                n = sel[s]
                resv[nres] = n
                nres += 1
                extra[n] = pf[n] - hg
            for s in range(hk):
                nshadow[sel[s]] = shadow
    for t in range(nt):
        n = touched[t]
        pf[n] = free[n]
        tmark[n] = False
    return shadow, nres
