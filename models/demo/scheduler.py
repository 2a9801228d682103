"""A small Slurm-like scheduler that makes the synthetic workload physically possible.

Policy, as a Slurm site with ``SchedulerType=sched/backfill`` runs it:
- the main scheduler starts jobs in arrival order per pool and stops at the first job that does not fit;
- every ``BF_INTERVAL`` seconds (when something changed) an EASY backfill pass reserves the blocked head's
  earliest start (its *shadow time*, from running jobs' time limits) and starts later jobs that fit now and
  end, by their limit, before it;
- jobs in the preemptible partition fill idle GPUs and are preempted (requeued when allowed) when a normal
  job cannot otherwise start;
- single-node jobs go best-fit (the fullest node that fits); gangs take whole free nodes;
- an advance reservation (models/demo/reservation_plan.py), once created, keeps off its nodes every job whose time
  limit would reach its start; from its start until its end they run only its own jobs, first come first served,
  whatever their time limit; at its end its jobs still running are killed (TIMEOUT, as Slurm's ResvOverRun 0) and
  what is still queued for it is cancelled;
- a node failure ends its jobs NODE_FAIL (requeued when allowed); an urgent drain requeues them (REQUEUED);
  drained or down nodes take no jobs.

Waits therefore come only from contention. The loop is plain Python over lists with heaps and per-pool
free-GPU buckets (sets of nodes by free-GPU count), so a start or an end costs O(1); the shadow time is a
numpy reduction over the pool's GPU slots.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np

from models.demo.config import GPUS_PER_NODE, Config
from models.demo.faults import DOWN, Outages
from models.demo.layout import Layout
from models.demo.reservation_plan import Reservation
from models.demo.workload import PLAN_STATES, Jobs

BF_INTERVAL = 60       # seconds between backfill passes (Slurm bf_interval; large sites use 60+)
BF_DEPTH = 12          # candidates tried per size class per backfill pass (Slurm's bf_max_job_test, per class)
REQUEUE_HOLD = 120     # a requeued job becomes eligible again after this many seconds

#: Instance states; the first five equal workload.PLAN_STATES.
STATES = PLAN_STATES + ("NODE_FAIL", "PREEMPTED", "REQUEUED", "RUNNING", "PENDING")
S_COMPLETED, S_FAILED, S_OOM, S_CANCELLED, S_TIMEOUT, S_NODE_FAIL, S_PREEMPTED, S_REQUEUED, S_RUNNING, \
    S_PENDING = range(len(STATES))

# event kinds, in the order they are handled at equal times
E_END, E_DOWN, E_UP, E_DRAIN, E_RESUME, E_ADD, E_RSTART, E_REND, E_CANCEL, E_ARRIVE, E_BF = range(11)
INF = float("inf")
NO_NODES: frozenset = frozenset()


@dataclass
class Instances:
    """One row per job instance (a requeued job has several). Times are UTC epoch seconds; -1 = none."""
    job: np.ndarray          # index into Jobs
    submit: np.ndarray
    eligible: np.ndarray
    start: np.ndarray
    end: np.ndarray          # -1 while running or pending at the horizon
    state: np.ndarray        # index into STATES
    # placement, one row per allocated GPU
    gpu_inst: np.ndarray
    gpu_node: np.ndarray
    gpu_index: np.ndarray
    # the instance a PREEMPTED instance was preempted for (-1 for every other): the truth that
    # `report preemption`'s attribution from accounting alone is tested against
    preempted_for: np.ndarray

    def __len__(self) -> int:
        return len(self.job)


def _size_class(g: int) -> int:
    return {1: 0, 2: 1, 4: 2, 8: 3}.get(g, 4)


class _Queue:
    """FIFO of instance ids with lazy deletion (``alive`` flags live in the scheduler)."""
    __slots__ = ("items", "head")

    def __init__(self):
        self.items: list[int] = []
        self.head = 0

    def first(self, alive: list) -> int:
        items, h = self.items, self.head
        while h < len(items) and not alive[items[h]]:
            h += 1
        if h > 4096 and h * 2 > len(items):
            del items[:h]
            h = 0
        self.head = h
        return items[h] if h < len(items) else -1


class Scheduler:
    def __init__(self, cfg: Config, jobs: Jobs, layout: Layout, outages: Outages, t_end: int, rng,
                 reservations: tuple[Reservation, ...] = ()):
        self.cfg, self.jobs, self.layout, self.t_end, self.rng = cfg, jobs, layout, t_end, rng
        nn = len(layout)
        self.npools = len(cfg.pools)
        self.free = [GPUS_PER_NODE] * nn
        self.free_np = np.full(nn, GPUS_PER_NODE, np.int16)
        self.pre_np = np.zeros(nn, np.int16)           # preemptible GPUs in use per node
        self.pre_tot = [0] * self.npools
        self.usable = [False] * nn
        self.usable_np = np.zeros(nn, bool)
        self.up = [True] * nn
        self.drained = [False] * nn
        self.exists = [False] * nn
        self.resv = reservations
        self.resv_of = [-1] * nn                                   # the started reservation holding a node
        self.rq = [_Queue() for _ in reservations]                 # each reservation's queue, arrival order
        self.upcoming: list[list] = [[] for _ in cfg.pools]       # per pool: reservations created, not started
        self.slot_job = [[-1] * GPUS_PER_NODE for _ in range(nn)]
        self.slot_end = np.zeros((nn, GPUS_PER_NODE))
        self.on_node: list[set] = [set() for _ in range(nn)]
        self.node_pool = layout.pool.tolist()
        self.buckets = [[set() for _ in range(GPUS_PER_NODE + 1)] for _ in range(self.npools)]
        part_pools = [[i for i, p in enumerate(cfg.pools) if p.name in part.pools] for part in cfg.partitions]
        self.part_pool = [pp[0] if not part.preemptible else -1 for pp, part in zip(part_pools, cfg.partitions)]
        self.fifo = [_Queue() for _ in range(self.npools)]          # arrival order, for the main scheduler
        self.queues = [[_Queue() for _ in range(5)] for _ in range(self.npools)]  # by size class, for backfill
        self.pre_queues = [_Queue() for _ in range(4)]
        self.npend = [0] * (self.npools + 1)   # pending instances per pool; last: the preemptible partition
        self.changed = [False] * self.npools   # something freed or arrived since the last backfill pass
        self.freed = [0] * self.npools          # counts releases and nodes coming back, per pool
        self.no_preempt = [None] * self.npools  # (head, freed, preemptible GPUs) of the last failed preemption
        self.blocked = [None] * self.npools     # (head, freed) when the head last failed to fit
        self.bf_pending = [False] * self.npools
        self.events: list = []
        self.seq = 0
        # job attributes as lists (fast scalar access)
        self.j_gpus = jobs.gpus.tolist()
        self.j_nodes = jobs.nodes.tolist()
        self.j_limit = jobs.limit_s.tolist()
        self.j_part = jobs.partition.tolist()
        self.j_plan = jobs.plan.tolist()
        self.j_run = jobs.run_s.tolist()
        self.j_requeue = jobs.requeue.tolist()
        self.j_patience = jobs.patience_s.tolist()
        self.j_resv = jobs.resv.tolist()
        self.preemptible = [cfg.partitions[p].preemptible for p in range(len(cfg.partitions))]
        # instance columns
        self.i_job: list[int] = []
        self.i_submit: list[int] = []
        self.i_elig: list[int] = []
        self.i_start: list[int] = []
        self.i_end: list[int] = []
        self.i_state: list[int] = []
        self.i_run: list[int] = []
        self.i_alloc: list = []
        self.i_by: list[int] = []        # preempted for (instance), -1 = not preempted
        self.alive: list[bool] = []      # pending and in a queue
        for i, (node, since) in enumerate(zip(range(nn), layout.since.tolist())):
            self._push(since, E_ADD, node)
        for n, kind, s, e, urgent in zip(outages.node.tolist(), outages.kind.tolist(), outages.start.tolist(),
                                         outages.end.tolist(), outages.urgent.tolist()):
            if kind == DOWN:
                self._push(s, E_DOWN, n)
                self._push(e, E_UP, n)
            else:
                self._push(s, E_DRAIN, n, urgent)
                self._push(e, E_RESUME, n)
        for r, res in enumerate(reservations):
            self.upcoming[res.pool].append((res.created, res.start, frozenset(res.nodes)))
            self._push(res.start, E_RSTART, r)
            self._push(res.end, E_REND, r)

    # ------------------------------------------------------------ plumbing

    def _push(self, t, kind, a, b=0):
        self.seq += 1
        heapq.heappush(self.events, (t, kind, self.seq, a, b))

    def _new_instance(self, j: int, submit: int, elig: int, run: int) -> int:
        i = len(self.i_job)
        self.i_job.append(j)
        self.i_submit.append(submit)
        self.i_elig.append(elig)
        self.i_start.append(-1)
        self.i_end.append(-1)
        self.i_state.append(S_PENDING)
        self.i_run.append(run)
        self.i_alloc.append(None)
        self.i_by.append(-1)
        self.alive.append(False)
        return i

    def _set_usable(self, n: int, flag: bool) -> None:
        if self.usable[n] == flag:
            return
        p = self.node_pool[n]
        if flag:
            self.buckets[p][self.free[n]].add(n)
            self.changed[p] = True
            self.freed[p] += 1
        else:
            self.buckets[p][self.free[n]].discard(n)
        self.usable[n] = flag
        self.usable_np[n] = flag

    def _healthy(self, n: int) -> bool:
        return self.exists[n] and self.up[n] and not self.drained[n]

    def _refresh_usable(self, n: int) -> None:
        """Usable by the pool's queue: healthy and in no started reservation."""
        self._set_usable(n, self._healthy(n) and self.resv_of[n] < 0)

    # ------------------------------------------------------------ allocation

    def _take(self, i: int, n: int, g: int, now: int, exp_end: float, pre: bool) -> None:
        p = self.node_pool[n]
        k = self.free[n]
        if self.usable[n]:        # a reserved node is in no bucket: the pool's queue does not see it
            self.buckets[p][k].discard(n)
            self.buckets[p][k - g].add(n)
        self.free[n] = k - g
        self.free_np[n] = k - g
        sj = self.slot_job[n]
        slots = [s for s in range(GPUS_PER_NODE) if sj[s] < 0][:g]
        row = self.slot_end[n]   # element writes beat a fancy-indexed write for a few slots
        for s in slots:
            sj[s] = i
            row[s] = exp_end
        self.on_node[n].add(i)
        if pre:
            self.pre_np[n] += g
            self.pre_tot[p] += g
        self.i_alloc[i].append((n, slots))

    def _try_start(self, i: int, p: int, now: int, avoid: frozenset = NO_NODES) -> bool:
        """Start instance i in pool p now if it fits (best fit), on nodes outside ``avoid``."""
        j = self.i_job[i]
        g, m = self.j_gpus[j], self.j_nodes[j]
        bk = self.buckets[p]
        pre = self.preemptible[self.j_part[j]]
        for created, start, nodes in self.upcoming[p]:   # a reservation ahead: keep off it unless done by then
            if created <= now < start < now + self.j_limit[j]:
                avoid = avoid | nodes
        if m == 1:
            for k in range(g, GPUS_PER_NODE + 1):
                if bk[k]:
                    if avoid:
                        n = next((x for x in bk[k] if x not in avoid), -1)
                        if n < 0:
                            continue
                    else:
                        n = next(iter(bk[k]))
                    self._start(i, now)
                    self._take(i, n, g, now, now + self.j_limit[j], pre)
                    return True
            return False
        full = bk[GPUS_PER_NODE]
        if len(full) < m:
            return False
        nodes = sorted(full - avoid)[:m]
        if len(nodes) < m:
            return False
        self._start(i, now)
        for n in nodes:
            self._take(i, n, GPUS_PER_NODE, now, now + self.j_limit[j], pre)
        return True

    def _start(self, i: int, now: int) -> None:
        self._unqueue(i)
        self.i_start[i] = now
        self.i_state[i] = S_RUNNING
        self.i_alloc[i] = []
        self._push(now + self.i_run[i], E_END, i)

    def _release(self, i: int) -> None:
        j = self.i_job[i]
        pre = self.preemptible[self.j_part[j]]
        for n, slots in self.i_alloc[i]:
            sj = self.slot_job[n]
            row = self.slot_end[n]
            for s in slots:
                sj[s] = -1
                row[s] = 0.0
            p = self.node_pool[n]
            k = self.free[n]
            g = len(slots)
            if self.usable[n]:
                self.buckets[p][k].discard(n)
                self.buckets[p][k + g].add(n)
            self.free[n] = k + g
            self.free_np[n] = k + g
            self.on_node[n].discard(i)
            if pre:
                self.pre_np[n] -= g
                self.pre_tot[p] -= g
            self.changed[p] = True
            self.freed[p] += 1

    def _kill(self, i: int, now: int, state: int) -> None:
        """End a running instance early (node failure, preemption, requeue) and requeue it when allowed."""
        self.i_end[i] = now
        self.i_state[i] = state
        self._release(i)
        j = self.i_job[i]
        if self.j_requeue[j] or state == S_REQUEUED:
            done = now - self.i_start[i]
            # checkpointed training resumes where it stopped; allow a few minutes to reload
            run = max(60, self.i_run[i] - done + 300)
            k = self._new_instance(j, now, now + REQUEUE_HOLD, run)
            self._push(now + REQUEUE_HOLD, E_ARRIVE, k)

    # ------------------------------------------------------------ queues

    def _unqueue(self, i: int) -> None:
        self.alive[i] = False
        j = self.i_job[i]
        if self.j_resv[j] < 0:
            self.npend[self.part_pool[self.j_part[j]]] -= 1

    def _enqueue(self, i: int, now: int) -> None:
        j = self.i_job[i]
        self.alive[i] = True
        r = self.j_resv[j]
        if r >= 0:
            if now >= self.resv[r].end:    # requeued after its reservation ended: its user cancels it
                self._cancel(i, now)
            else:
                self.rq[r].items.append(i)
                self._resv_main(r, now)
            return
        p = self.part_pool[self.j_part[j]]
        self.npend[p] += 1
        if p < 0:
            self.pre_queues[min(_size_class(self.j_gpus[j]), 3)].items.append(i)
            for q in range(self.npools):
                self.changed[q] = True
                self._main(q, now)
        else:
            self.queues[p][_size_class(self.j_gpus[j])].items.append(i)
            self.fifo[p].items.append(i)
            self.changed[p] = True
            self._main(p, now)

    def _head(self, p: int) -> int:
        return self.fifo[p].first(self.alive) if self.npend[p] else -1

    def _main(self, p: int, now: int) -> None:
        """Start queued jobs of pool p in order until one does not fit (then try preempting for it)."""
        while True:
            h = self._head(p)
            if h < 0:
                self._fill_preemptible(p, now)
                return
            if self.blocked[p] == (h, self.freed[p]):   # nothing freed since this head last failed to fit
                if not self.pre_tot[p] or self.no_preempt[p] == (h, self.freed[p], self.pre_tot[p]):
                    self._want_bf(p, now)
                    return
            elif self._try_start(h, p, now):
                continue
            self.blocked[p] = (h, self.freed[p])
            if self.pre_tot[p]:
                key = (h, self.freed[p], self.pre_tot[p])
                if self.no_preempt[p] != key:   # nothing changed since preemption last failed for this head
                    if self._preempt_for(h, p, now) and self._try_start(h, p, now):
                        continue
                    self.no_preempt[p] = (h, self.freed[p], self.pre_tot[p])
            self._want_bf(p, now)
            return

    def _main_all(self, now: int) -> None:
        for p in range(self.npools):
            self._main(p, now)

    def _want_bf(self, p: int, now: int) -> None:
        if not self.bf_pending[p]:
            self.bf_pending[p] = True
            self._push(now + BF_INTERVAL, E_BF, p)

    def _fill_preemptible(self, p: int, now: int) -> None:
        if not self.npend[-1]:
            return
        alive = self.alive
        for q in self.pre_queues:
            while True:
                h = q.first(alive)
                if h < 0 or not self._try_start(h, p, now):
                    break

    def _shadow(self, h: int, p: int, now: int) -> tuple[float, frozenset]:
        """The blocked head's reservation in pool p: the earliest time it could start (by running jobs' time
        limits) and the nodes it would start on."""
        lo, hi = self.layout.pool_range[p]
        idx = np.flatnonzero(self.usable_np[lo:hi])
        if not len(idx):
            return INF, frozenset()
        ends = self.slot_end[lo + idx]
        j = self.i_job[h]
        g, m = self.j_gpus[j], self.j_nodes[j]
        if m == 1:
            node_t = np.partition(ends, g - 1, axis=1)[:, g - 1]
            best = int(np.argmin(node_t))
            return max(float(now), float(node_t[best])), frozenset([lo + int(idx[best])])
        node_t = ends.max(axis=1)
        if len(node_t) < m:
            return INF, frozenset()
        pick = np.argpartition(node_t, m - 1)[:m]
        return max(float(now), float(node_t[pick].max())), frozenset((lo + idx[pick]).tolist())

    def _backfill(self, p: int, now: int) -> None:
        self.bf_pending[p] = False
        if not self.changed[p]:
            return
        self.changed[p] = False
        self._main(p, now)
        h = self._head(p)
        if h < 0:
            return
        alive = self.alive
        bk = self.buckets[p]
        lim = self.j_limit
        maxfree = next((k for k in range(GPUS_PER_NODE, 0, -1) if bk[k]), 0)
        if maxfree == 0:
            return
        shadow, reserved = self._shadow(h, p, now)
        for c, q in enumerate(self.queues[p] + self.pre_queues):
            if maxfree == 0:
                break
            gang = c == 4
            if gang:  # gangs need at least two whole free nodes
                if len(bk[GPUS_PER_NODE]) < 2:
                    continue
            elif (1, 2, 4, 8, 0, 1, 2, 4, 8)[c] > maxfree:
                continue
            items = q.items
            kept = []
            lo = k = q.head
            while k < len(items) and len(kept) < BF_DEPTH:
                i = items[k]
                k += 1
                if not alive[i]:
                    continue
                if i == h:
                    kept.append(i)
                    continue
                # EASY: a job that would outlast the reservation must keep off the reserved nodes
                avoid = reserved if now + lim[self.i_job[i]] > shadow else NO_NODES
                if self._try_start(i, p, now, avoid):
                    maxfree = next((x for x in range(GPUS_PER_NODE, 0, -1) if bk[x]), 0)
                else:
                    kept.append(i)
                    if not gang and not avoid:  # same size, anywhere: nothing later in this class fits either
                        break
            items[lo:k] = kept  # drop started and dead entries so later passes do not step over them

    def _preempt_for(self, h: int, p: int, now: int) -> bool:
        """Preempt preemptible jobs on the fewest nodes so that h fits; True if it now does."""
        j = self.i_job[h]
        g, m = self.j_gpus[j], self.j_nodes[j]
        lo, hi = self.layout.pool_range[p]
        free = self.free_np[lo:hi]
        pre = self.pre_np[lo:hi]
        ok = self.usable_np[lo:hi] & (free + pre >= (g if m == 1 else GPUS_PER_NODE)) & (pre > 0)
        cand = np.flatnonzero(ok)
        if m > 1:
            full = len(self.buckets[p][GPUS_PER_NODE])
            if full + len(cand) < m:
                return False
            cand = cand[np.argsort(pre[cand], kind="stable")][: m - full]
        else:
            if not len(cand):
                return False
            cand = cand[[int(np.argmin(pre[cand]))]]
        for n in (lo + cand).tolist():
            victims = sorted((i for i in self.on_node[n] if self.preemptible[self.j_part[self.i_job[i]]]),
                             reverse=True)
            for i in victims:
                if m == 1 and self.free[n] >= g:
                    break
                self._kill(i, now, S_PREEMPTED)
                self.i_by[i] = h
        return True

    # ------------------------------------------------------------ reservations

    def _resv_main(self, r: int, now: int) -> None:
        """Start reservation r's queued jobs in arrival order while the first one fits on its nodes (no backfill
        inside a reservation). A job whose time limit outlasts the reservation starts too, and is killed at its end
        (``_resv_finish``): what Slurm 22.05 does with ResvOverRun 0 (docs/SIMULATOR.md, measured)."""
        res = self.resv[r]
        if not res.start <= now < res.end:
            return
        items, alive = self.rq[r].items, self.alive
        for i in items:
            if not alive[i]:
                continue
            if not self._resv_fit(i, res, now):
                return
        items[:] = [i for i in items if alive[i]]

    def _resv_fit(self, i: int, res: Reservation, now: int) -> bool:
        """Start instance i on the reservation's healthy nodes now if it fits (best fit; gangs on whole nodes)."""
        j = self.i_job[i]
        g, m = self.j_gpus[j], self.j_nodes[j]
        free = self.free
        ok = [n for n in res.nodes if self._healthy(n)]
        if m == 1:
            fit = [n for n in ok if free[n] >= g]
            if not fit:
                return False
            chosen = [min(fit, key=lambda n: (free[n], n))]
        else:
            chosen = [n for n in ok if free[n] == GPUS_PER_NODE][:m]
            if len(chosen) < m:
                return False
        self._start(i, now)
        for n in chosen:
            self._take(i, n, g if m == 1 else GPUS_PER_NODE, now, now + self.j_limit[j], False)
        return True

    def _resv_begin(self, r: int, now: int) -> None:
        res = self.resv[r]
        mine = (res.created, res.start, frozenset(res.nodes))
        self.upcoming[res.pool] = [u for u in self.upcoming[res.pool] if u != mine]
        for n in res.nodes:
            self.resv_of[n] = r
            self._refresh_usable(n)
        self._resv_main(r, now)

    def _resv_finish(self, r: int, now: int) -> None:
        """The reservation ends: its jobs still running are killed (TIMEOUT, not requeued), its nodes return to their
        pool, what is still queued for it is cancelled."""
        res = self.resv[r]
        for n in res.nodes:
            for i in sorted(self.on_node[n]):
                if self.i_state[i] == S_RUNNING and self.j_resv[self.i_job[i]] == r:
                    self.i_end[i] = now
                    self.i_state[i] = S_TIMEOUT
                    self._release(i)
        for n in res.nodes:
            self.resv_of[n] = -1
            self._refresh_usable(n)
        for i in self.rq[r].items:
            if self.alive[i]:
                self._cancel(i, now)
        self.rq[r].items.clear()
        self._main(res.pool, now)

    def _nudge_resv(self, nodes, now: int) -> None:
        """Nodes freed GPUs or came back: the reservations holding any of them try their queues."""
        for r in {self.resv_of[n] for n in nodes if self.resv_of[n] >= 0}:
            self._resv_main(r, now)

    def _cancel(self, i: int, now: int) -> None:
        self._unqueue(i)
        self.i_state[i] = S_CANCELLED
        self.i_end[i] = now

    # ------------------------------------------------------------ the loop

    def run(self) -> Instances:
        jobs = self.jobs
        submit = jobs.submit.tolist()
        nj = len(submit)
        ev = self.events
        a = 0
        t_end = self.t_end
        while True:
            ta = submit[a] if a < nj else INF
            te = ev[0][0] if ev else INF
            now = ta if ta < te else te
            if now >= t_end:
                break
            self._now = now
            if te <= ta:
                _, kind, _, x, y = heapq.heappop(ev)
                self._handle(kind, x, y, now)
            else:
                i = self._new_instance(a, now, now, self.j_run[a])
                pat = self.j_patience[a]
                a += 1
                self._enqueue(i, now)
                if pat != INF and self.alive[i]:
                    self._push(now + int(pat), E_CANCEL, i)
        self._now = t_end
        return self._result()

    def _handle(self, kind: int, x: int, y, now: int) -> None:
        if kind == E_END:
            i = x
            if self.i_state[i] != S_RUNNING:
                return
            self.i_end[i] = now
            self.i_state[i] = self.j_plan[self.i_job[i]]
            self._release(i)
            p = self.node_pool[self.i_alloc[i][0][0]]
            if self.resv:
                self._nudge_resv([n for n, _ in self.i_alloc[i]], now)
            self._main(p, now)
            if self.changed[p] and self.bf_pending[p] is False and self._head(p) >= 0:
                self._want_bf(p, now)
        elif kind == E_BF:
            self._backfill(x, now)
        elif kind == E_ARRIVE:
            self._enqueue(x, now)
        elif kind == E_CANCEL:
            if self.alive[x]:
                self._cancel(x, now)
        elif kind == E_DOWN:
            n = x
            self.up[n] = False
            self._refresh_usable(n)
            for i in sorted(self.on_node[n]):
                self._kill(i, now, S_NODE_FAIL)
            self._main_all(now)
        elif kind == E_UP:
            self.up[x] = True
            self._refresh_usable(x)
            self._nudge_resv([x], now)
            self._main(self.node_pool[x], now)
        elif kind == E_DRAIN:
            n = x
            self.drained[n] = True
            self._refresh_usable(n)
            if y:
                for i in sorted(self.on_node[n]):
                    self._kill(i, now, S_REQUEUED)
                self._main_all(now)
        elif kind == E_RESUME:
            self.drained[x] = False
            self._refresh_usable(x)
            self._nudge_resv([x], now)
            self._main(self.node_pool[x], now)
        elif kind == E_ADD:
            self.exists[x] = True
            self._refresh_usable(x)
            self._main(self.node_pool[x], now)
        elif kind == E_RSTART:
            self._resv_begin(x, now)
        elif kind == E_REND:
            self._resv_finish(x, now)

    def _result(self) -> Instances:
        gi, gn, gx = [], [], []
        for i, alloc in enumerate(self.i_alloc):
            if alloc:
                for n, slots in alloc:
                    gi.extend([i] * len(slots))
                    gn.extend([n] * len(slots))
                    gx.extend(slots)
        state = np.array(self.i_state, np.int8)
        return Instances(job=np.array(self.i_job, np.int64), submit=np.array(self.i_submit, np.int64),
                         eligible=np.array(self.i_elig, np.int64), start=np.array(self.i_start, np.int64),
                         end=np.array(self.i_end, np.int64), state=state,
                         gpu_inst=np.array(gi, np.int64), gpu_node=np.array(gn, np.int32),
                         gpu_index=np.array(gx, np.int8), preempted_for=np.array(self.i_by, np.int64))


def schedule(cfg: Config, jobs: Jobs, layout: Layout, outages: Outages, t_end: int, rng,
             reservations: tuple[Reservation, ...] = ()) -> Instances:
    """Run the workload through the scheduler up to ``t_end`` (the export time); ``jobs.resv`` indexes
    ``reservations``."""
    return Scheduler(cfg, jobs, layout, outages, t_end, rng, reservations).run()
