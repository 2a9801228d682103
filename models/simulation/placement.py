"""The FGD paper's placement experiment (Weng et al., "Beware of Fragmentation", USENIX ATC'23) on the
Alibaba openb traces, reimplemented: ``run_protocol(nodes, pods, policies, seeds) -> curves``.

Protocol (docs/SIMULATOR.md, "Placement protocol", says exactly what is implemented and where it departs
from the paper's simulator, hkust-adsl/kubernetes-scheduler-simulator):
1. Pods: the trace's pods (CPU milli, memory MiB, GPU count, milli-GPU per GPU, GPU-model constraint).
   Pods resampled with replacement (seeded) are appended while the total requested GPU stays within
   130 % of the cluster's GPU capacity; the whole list is shuffled with the same seed.
2. Nodes: the trace's GPU nodes (CPU, memory, GPUs of 1000 milli each, GPU model). Pods arrive one at a
   time and never leave; a pod that fits on no node is skipped.
3. Policies score every node that fits and take the highest integer score, ties broken uniformly at
   random (the Kubernetes scheduler's selectHost): Random, DotProd, GpuClustering, GpuPacking, BestFit, FGD.
4. After every pod: GPU allocation ratio (allocated milli-GPU / capacity) and fragmentation rate
   (FGD's cluster fragmentation / idle milli-GPU against the typical pods, METRICS.md §1.1); the curves
   average these over the pods whose arrived demand rounds to each 1 % step (0-130 %).
Units: milli-GPU internally (1000 = one GPU); percentages in the curves.
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import polars as pl
from numba import njit, types
from numba.typed import Dict

POLICIES = ["Random", "DotProd", "GpuClustering", "GpuPacking", "BestFit", "FGD"]
MAX_SPEC_CPU, MAX_SPEC_GPU, MILLI = 128000, 8000, 1000
TARGET_RATIO = 1.3
POPULARITY = 0.95          # typical pods cover 95 % of pods (the paper's run scripts)
MAX_GPUS = 8


class TraceError(ValueError):
    """A trace file that cannot be read; the message names file, line and field."""


# ---------------------------------------------------------------- loading

def _read_csv(path: Path, required: list[str]) -> pl.DataFrame:
    try:
        df = pl.read_csv(path, infer_schema_length=0)
    except Exception as exc:  # polars' messages are long; keep one line
        raise TraceError(f"{path}: cannot read as CSV: {str(exc).splitlines()[0]}") from exc
    missing = [c for c in required if c not in df.columns]
    if missing:
        raise TraceError(f"{path}: line 1: missing column(s) {', '.join(missing)}")
    return df


def _ints(df: pl.DataFrame, col: str, path: Path) -> np.ndarray:
    s = df.get_column(col).cast(pl.Int64, strict=False)
    bad = s.is_null() & df.get_column(col).is_not_null()
    if bad.any():
        i = int(bad.arg_max())
        raise TraceError(f"{path}: line {i + 2}: field {col}: {df.get_column(col)[i]!r} is not an integer")
    # a writeable copy: polars hands out read-only views, and numba would compile run_placement again for them
    return np.array(s.fill_null(0).to_numpy(), dtype=np.int64)


def load_trace(pod_csv: str | Path, node_csv: str | Path | None = None) -> tuple[dict, dict]:
    """Read an openb pod list and its node list (default: ``openb_node_list_gpu_node.csv`` beside it, as the
    trace's prepare_input.sh uses). Returns (nodes, pods) dicts of numpy arrays."""
    pod_csv = Path(pod_csv)
    node_csv = Path(node_csv) if node_csv else pod_csv.with_name("openb_node_list_gpu_node.csv")
    if not pod_csv.exists():
        raise TraceError(f"{pod_csv}: no such file")
    if not node_csv.exists():
        raise TraceError(f"{node_csv}: no such file (the node list of {pod_csv.name})")
    nd = _read_csv(node_csv, ["sn", "cpu_milli", "memory_mib", "gpu", "model"])
    models = sorted({m for m in nd.get_column("model").to_list() if m})
    nodes = {"name": nd.get_column("sn").to_list(), "cpu": _ints(nd, "cpu_milli", node_csv),
             "mem": _ints(nd, "memory_mib", node_csv), "gpus": _ints(nd, "gpu", node_csv),
             "model": np.array([models.index(m) if m else -1 for m in nd.get_column("model").to_list()],
                               dtype=np.int64), "models": models}
    if (nodes["gpus"] > MAX_GPUS).any():
        raise TraceError(f"{node_csv}: a node has more than {MAX_GPUS} GPUs")
    pd_ = _read_csv(pod_csv, ["name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli"])
    num = _ints(pd_, "num_gpu", pod_csv)
    raw_milli = _ints(pd_, "gpu_milli", pod_csv)
    # as the trace's pod_csv_to_yaml.py: milli in (0, 1000], 1000 above that, 0 for CPU-only pods
    milli = np.where(num == 0, 0, np.where(raw_milli > MILLI, MILLI, np.maximum(raw_milli, 0)))
    spec = pd_.get_column("gpu_spec").fill_null("").to_list() if "gpu_spec" in pd_.columns else [""] * pd_.height
    spec = ["|".join(x for x in s.split("|") if x) for s in spec]
    mask = np.zeros(len(spec), dtype=np.int64)
    for i, s in enumerate(spec):
        for m in s.split("|") if s else []:
            mask[i] |= (1 << models.index(m)) if m in models else (1 << 62)  # unknown model: fits nowhere
    cpu = _ints(pd_, "cpu_milli", pod_csv)
    pods = {"name": pd_.get_column("name").to_list(), "cpu": cpu,
            "cpu_nz": np.where(cpu == 0, 100, cpu),  # Kubernetes' non-zero request used in scoring
            "mem": _ints(pd_, "memory_mib", pod_csv), "num": num, "milli": milli, "mask": mask, "spec": spec}
    pods["spec_id"] = spec_ids(pods)
    return nodes, pods


def typical_pods(pods: dict, popularity: float = POPULARITY) -> dict:
    """FGD's target workload M: pod specs (CPU, milli-GPU, GPU count, GPU-model constraint) by decreasing
    frequency until they cover ``popularity`` of pods, probabilities renormalised (utils.GetTypicalPods)."""
    keys = list(zip(pods["cpu_nz"].tolist(), pods["milli"].tolist(), pods["num"].tolist(), pods["spec"]))
    counts: dict = {}
    for k in keys:
        counts[k] = counts.get(k, 0) + 1
    # decreasing count; ties in decreasing (cpu, milli, num, spec) as the Go code's reversed sort
    order = sorted(counts.items(), key=lambda kv: (kv[1], kv[0]), reverse=True)
    total = len(keys)
    chosen, cum = [], 0
    for k, v in order:
        if cum >= popularity * total:
            break
        chosen.append((k, v))
        cum += v
    mask_of = {s: m for s, m in zip(pods["spec"], pods["mask"].tolist())}
    return {"cpu": np.array([k[0] for k, _ in chosen], dtype=np.int64),
            "milli": np.array([k[1] for k, _ in chosen], dtype=np.int64),
            "num": np.array([k[2] for k, _ in chosen], dtype=np.int64),
            "mask": np.array([mask_of[k[3]] for k, _ in chosen], dtype=np.int64),
            "prob": np.array([v / cum for _, v in chosen], dtype=np.float64)}


def arrival_order(pods: dict, capacity_milli: int, seed: int, ratio: float = TARGET_RATIO) -> np.ndarray:
    """Indices of the pods in arrival order: all trace pods plus resampled ones (with replacement) appended
    while the total requested milli-GPU stays <= ratio x capacity, then shuffled; one seeded generator."""
    rng = np.random.default_rng(seed)
    req = pods["milli"] * pods["num"]
    target = ratio * capacity_milli
    idx = list(range(req.size))
    total = int(req.sum())
    if total > target:  # trim (the simulator's tuneDownPods); not needed for the openb variants
        keep = rng.permutation(req.size)
        idx, total = [], 0
        for i in keep:
            if total + req[i] <= target:
                idx.append(int(i))
                total += int(req[i])
    else:
        batch = rng.integers(0, req.size, size=4096)
        b = 0
        while True:
            if b == batch.size:
                batch, b = rng.integers(0, req.size, size=4096), 0
            i = int(batch[b])
            b += 1
            if total + req[i] > target:
                break
            idx.append(i)
            total += int(req[i])
    order = np.array(idx, dtype=np.int64)
    rng.shuffle(order)
    return order


# ---------------------------------------------------------------- FGD fragmentation (numba)

@njit(cache=True)
def node_frag(cpu_left, left, ngpu, model, tp_cpu, tp_milli, tp_num, tp_mask, tp_prob):
    """F_n(M) of one node in milli-GPU: for each typical pod m, the idle GPU milli that m cannot use
    (GetNodePodFrag: all idle GPU unless m fits, in which case the GPUs with less than m's milli)."""
    free = 0
    for g in range(ngpu):
        free += left[g]
    if free == 0:
        return 0.0
    f = 0.0
    for m in range(tp_prob.size):
        milli = tp_milli[m]
        if milli == 0:
            f += tp_prob[m] * free        # CPU-only task: all idle GPU is fragment (XL/XR)
            continue
        if tp_mask[m] != 0 and (model < 0 or (tp_mask[m] >> model) & 1 == 0):
            f += tp_prob[m] * free        # no access (GPU-model constraint)
            continue
        cnt = 0
        small = 0
        for g in range(ngpu):
            if left[g] >= milli:
                cnt += 1
            else:
                small += left[g]
        if cnt >= tp_num[m] and cpu_left >= tp_cpu[m]:
            f += tp_prob[m] * small       # Q3: fits; only GPUs too small for m are fragment
        else:
            f += tp_prob[m] * free        # Q1/Q2/Q4: lacks GPU and/or CPU
    return f


@njit(cache=True)
def _state_key(cpu_left, left, ngpu, model):
    """Order-independent 64-bit key of a node state (the simulator memoises frag the same way)."""
    h = np.uint64(1469598103934665603) ^ np.uint64(cpu_left * 1000003 + model * 7919 + ngpu)
    acc = np.uint64(0)
    for g in range(ngpu):
        z = np.uint64(left[g] + 0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        acc += z ^ (z >> np.uint64(31))
    h = (h ^ acc) * np.uint64(1099511628211)
    return np.int64(h)


@njit(cache=True)
def _frag_memo(memo, cpu_left, left, ngpu, model, tp_cpu, tp_milli, tp_num, tp_mask, tp_prob):
    key = _state_key(cpu_left, left, ngpu, model)
    v = memo.get(key, -1.0)
    if v < 0:
        v = node_frag(cpu_left, left, ngpu, model, tp_cpu, tp_milli, tp_num, tp_mask, tp_prob)
        memo[key] = v
    return v


@njit(cache=True)
def _sigmoid_score(before, after):
    return np.int64(100.0 / (1.0 + math.exp(-(before - after) / 1000.0)))


# ---------------------------------------------------------------- one run (numba)

@njit(cache=True)
def _fits(n, pc, pm, pnum, pmilli, pmask, cpu_left, mem_left, left, ngpus, model):
    if cpu_left[n] < pc or mem_left[n] < pm:
        return False
    if pmilli == 0:
        return True
    if ngpus[n] == 0:
        return False
    if pmask != 0 and (model[n] < 0 or (pmask >> model[n]) & 1 == 0):
        return False
    cnt = 0
    for g in range(ngpus[n]):
        if left[n, g] >= pmilli:
            cnt += 1
    return cnt >= pnum


@njit(cache=True)
def _best_gpu(left_row, ngpu, pmilli):
    """Open-Gpu-Share's 'best' GPU for a shared pod: the least free GPU that still fits (first such)."""
    best = -1
    for g in range(ngpu):
        if left_row[g] >= pmilli and (best < 0 or left_row[g] < left_row[best]):
            best = g
    return best


@njit(cache=True)
def _random_gpu(left_row, ngpu, pmilli):
    """Open-Gpu-Share's 'random' GPU for a shared pod: uniform over the GPUs that fit (the Random policy's)."""
    pick = -1
    cnt = 0
    for g in range(ngpu):
        if left_row[g] >= pmilli:
            cnt += 1
            if np.random.randint(0, cnt) == 0:
                pick = g
    return pick


@njit(cache=True)
def _score(policy, n, pc, pcz, pm, pnum, pmilli, pmask, cpu_left, mem_left, left, n_gpus, n_model, aff,
           nfrag, memo, tp_cpu, tp_milli, tp_num, tp_mask, tp_prob, tmp):
    """(score, GPU) of node n for a pod: the policy's integer score (-1: the pod does not fit) and, for FGD
    and a shared pod, the GPU whose use lowers fragmentation most (-1 otherwise)."""
    if not _fits(n, pc, pm, pnum, pmilli, pmask, cpu_left, mem_left, left, n_gpus, n_model):
        return -1, -1
    share = pnum == 1 and 0 < pmilli < 1000
    G = n_gpus[n]
    gsel = -1
    ltot = 0
    for g in range(G):
        ltot += left[n, g]
    if policy == 0:      # Random: every feasible node scores the same
        s = 0
    elif policy == 1:    # DotProd (merge dims, normalised by max spec): lower dot product is better
        dot = (cpu_left[n] / MAX_SPEC_CPU) * (pcz / MAX_SPEC_CPU) \
            + (ltot / MAX_SPEC_GPU) * (pmilli * pnum / MAX_SPEC_GPU)
        s = np.int64(100.0 * (1.0 - dot / 2.0))
    elif policy == 2:    # GpuClustering: prefer nodes already running the same GPU-affinity tag
        if pmilli == 0:
            s = 0
        else:
            tag = 0 if share else pnum
            ntags = 0
            for t in range(9):
                if aff[n, t] > 0:
                    ntags += 1
            base = 25 * (MAX_SPEC_GPU - ltot) // MAX_SPEC_GPU
            if aff[n, tag] > 0:
                s = base + (75 if ntags == 1 else 50)
            else:
                s = base + (25 if ntags == 0 else 0)
    elif policy == 3:    # GpuPacking: shared GPUs > free GPUs on used nodes > free nodes
        if pmilli == 0:
            s = 0
        else:
            full = 0
            for g in range(G):
                if left[n, g] == 1000:
                    full += 1
            if full == G:
                s = max(33 - full, full)
            else:
                # GPUs in ascending free order (stable), take those that fit
                for g in range(G):
                    tmp[g] = g
                for a in range(1, G):
                    b = a
                    while b > 0 and left[n, tmp[b - 1]] > left[n, tmp[b]]:
                        tmp[b - 1], tmp[b] = tmp[b], tmp[b - 1]
                        b -= 1
                need = pnum
                full_use = 0
                ratio = 0
                for a in range(G):
                    if need == 0:
                        break
                    lg = left[n, tmp[a]]
                    if pmilli <= lg:
                        need -= 1
                        ratio += lg * 100 // 1000
                        if lg == 1000:
                            full_use += 1
                if full_use > 0:
                    s = max(50 - full_use, 33)
                else:
                    s = max(100 - ratio // 10, 50)
    elif policy == 4:    # BestFit: least leftover (CPU and GPU, normalised by max spec)
        sc = 0.5 * (cpu_left[n] - pcz) / MAX_SPEC_CPU + 0.5 * (ltot - pmilli * pnum) / MAX_SPEC_GPU
        s = np.int64((1.0 - sc) * 100.0)
    else:                # FGD: least growth of the node's fragmentation
        before = nfrag[n]
        if share:
            s = -1
            for g in range(G):
                if left[n, g] >= pmilli:
                    for a in range(G):
                        tmp[a] = left[n, a]
                    tmp[g] -= pmilli
                    after = _frag_memo(memo, cpu_left[n] - pcz, tmp, G, n_model[n],
                                       tp_cpu, tp_milli, tp_num, tp_mask, tp_prob)
                    sg = _sigmoid_score(before, after)
                    if gsel < 0 or sg > s:
                        s = sg
                        gsel = g
        elif cpu_left[n] < pcz:
            # a CPU-less pod passes the filter on its zero request but is scored on Kubernetes' non-zero
            # 100m; the paper's NodeResource.Sub then fails and leaves the node as it is
            s = _sigmoid_score(before, before)
        else:
            for a in range(G):
                tmp[a] = left[n, a]
            need = pnum if pmilli > 0 else 0
            for a in range(G):
                if need == 0:
                    break
                if tmp[a] >= pmilli and tmp[a] == 1000:
                    tmp[a] -= pmilli
                    need -= 1
            after = _frag_memo(memo, cpu_left[n] - pcz, tmp, G, n_model[n],
                               tp_cpu, tp_milli, tp_num, tp_mask, tp_prob)
            s = _sigmoid_score(before, after)
    return s, gsel


@njit(cache=True)
def run_placement(policy, seed, order, p_spec, p_cpu, p_cpunz, p_mem, p_num, p_milli, p_mask,
                  n_cpu, n_mem, n_gpus, n_model, n_rank, random_ties, tp_cpu, tp_milli, tp_num, tp_mask, tp_prob,
                  out_arrived, out_used, out_frag, out_idle, out_node):
    """Place pods in ``order`` one at a time under ``policy`` (index into POLICIES); write per-pod series
    and the node each pod went to (-1: it fit nowhere).

    Equal scores go to the node of lowest ``n_rank``: the paper's scheduler (a patched Kubernetes 1.20
    selectHost) takes the lexicographically smallest node name among the best, and its simulator names
    nodes with a seeded random permutation prefix, so ties follow one random node order per seed.
    Random is the exception: its RandomScore plugin gives 100 to one uniformly drawn feasible node.
    ``random_ties`` breaks every tie uniformly instead (upstream Kubernetes' reservoir sampling).

    A node's score for a pod depends only on the node's state and the pod's spec (``p_spec``: identical
    requests share an id), and one node changes per pod, so scores are cached per (node, spec) and
    recomputed only for nodes whose state version moved: the loop over nodes is then mostly array reads."""
    np.random.seed(seed)
    N = n_cpu.size
    S = 0
    for i in range(p_spec.size):
        if p_spec[i] + 1 > S:
            S = p_spec[i] + 1
    cpu_left = n_cpu.copy()
    mem_left = n_mem.copy()
    left = np.zeros((N, 8), np.int64)
    aff = np.zeros((N, 9), np.int64)   # pods per GPU-affinity tag: 0 = shared GPU, k = k whole GPUs
    nfrag = np.zeros(N)
    nver = np.zeros(N, np.int64)
    cver = np.full((S, N), -1, np.int64)
    cscore = np.zeros((S, N), np.int64)
    cgpu = np.zeros((S, N), np.int64)
    memo = Dict.empty(key_type=types.int64, value_type=types.float64)
    idle = 0.0
    for n in range(N):
        for g in range(n_gpus[n]):
            left[n, g] = 1000
        idle += 1000.0 * n_gpus[n]
        nfrag[n] = _frag_memo(memo, cpu_left[n], left[n], n_gpus[n], n_model[n],
                              tp_cpu, tp_milli, tp_num, tp_mask, tp_prob)
    frag = nfrag.sum()
    arrived = 0.0
    used = 0.0
    tmp = np.zeros(8, np.int64)
    cand = np.empty(N, np.int64)
    for step in range(order.size):
        i = order[step]
        sp = p_spec[i]
        pc = p_cpu[i]
        pnum = p_num[i]
        pmilli = p_milli[i]
        share = pnum == 1 and 0 < pmilli < 1000
        arrived += pmilli * pnum
        best = -1
        best_s = -1
        best_gpu = -1
        ties = 0
        sv = cver[sp]
        ss = cscore[sp]
        sg = cgpu[sp]
        for n in range(N):
            if sv[n] != nver[n]:
                s, gsel = _score(policy, n, pc, p_cpunz[i], p_mem[i], pnum, pmilli, p_mask[i], cpu_left, mem_left,
                                 left, n_gpus, n_model, aff, nfrag, memo, tp_cpu, tp_milli, tp_num, tp_mask,
                                 tp_prob, tmp)
                ss[n] = s
                sg[n] = gsel
                sv[n] = nver[n]
            s = ss[n]
            if s < 0:
                continue
            if policy == 0:      # Random: one uniform draw among the feasible nodes (below)
                cand[ties] = n
                ties += 1
                continue
            if s > best_s:
                best_s = s
                best = n
                best_gpu = sg[n]
                ties = 1
            elif s == best_s:
                ties += 1
                if random_ties:
                    if np.random.randint(0, ties) == 0:
                        best = n
                        best_gpu = sg[n]
                elif n_rank[n] < n_rank[best]:
                    best = n
                    best_gpu = sg[n]
        if policy == 0 and ties > 0:
            best = cand[np.random.randint(0, ties)]
        if best >= 0:
            n = best
            G = n_gpus[n]
            cpu_left[n] -= pc
            mem_left[n] -= p_mem[i]
            nver[n] += 1
            if pmilli > 0:
                if share:
                    if policy == 5:
                        g = best_gpu
                    elif policy == 0:
                        g = _random_gpu(left[n], G, pmilli)
                    else:
                        g = _best_gpu(left[n], G, pmilli)
                    left[n, g] -= pmilli
                    aff[n, 0] += 1
                else:
                    need = pnum
                    for g in range(G):
                        if need == 0:
                            break
                        if left[n, g] == 1000:
                            left[n, g] = 0
                            need -= 1
                    aff[n, pnum] += 1
                used += pmilli * pnum
                idle -= pmilli * pnum
            newf = _frag_memo(memo, cpu_left[n], left[n], G, n_model[n],
                              tp_cpu, tp_milli, tp_num, tp_mask, tp_prob)
            frag += newf - nfrag[n]
            nfrag[n] = newf
        out_node[step] = best
        out_arrived[step] = arrived
        out_used[step] = used
        out_frag[step] = frag
        out_idle[step] = idle


# ---------------------------------------------------------------- the protocol and its curves

def discretize(arrived: np.ndarray, used: np.ndarray, frag: np.ndarray, idle: np.ndarray,
               capacity_milli: float, max_pct: int = 130) -> pl.DataFrame:
    """Per 1 % of arrived demand: mean allocation and fragmentation rate over the pods whose arrived demand
    rounds to that percentage (±1 % when none does), as the paper's merge_alloc_discrete.py."""
    arr_pct = np.round(arrived / capacity_milli * 100.0)
    alloc = used / capacity_milli * 100.0
    frate = np.where(idle > 0, frag / np.maximum(idle, 1e-12) * 100.0, 0.0)
    rows = []
    for r in range(0, max_pct + 1):
        m = arr_pct == r
        if not m.any():
            m = (arr_pct >= r - 1) & (arr_pct <= r + 1)
            if not m.any():
                continue
        rows.append((r, float(alloc[m].mean()), float(frate[m].mean())))
    return pl.DataFrame(rows, schema={"arrived_pct": pl.Int64, "alloc_pct": pl.Float64,
                                      "frag_rate_pct": pl.Float64}, orient="row")


def spec_ids(pods: dict) -> np.ndarray:
    """Pods with identical requests (CPU, memory, GPUs, milli-GPU, model constraint) share an id (0..S-1)."""
    key = np.stack([pods["cpu"], pods["mem"], pods["num"], pods["milli"], pods["mask"]], axis=1)
    return np.unique(key, axis=0, return_inverse=True)[1].reshape(-1).astype(np.int64)


def node_ranks(n_nodes: int, seed: int) -> np.ndarray:
    """Tie-break priority of each node for one seed (lower wins): a seeded random permutation, as the paper's
    simulator prefixes node names with ``rand.Perm`` and its scheduler takes the smallest name among ties.
    The same for every policy of a seed, like the paper's (one seeded generator per run)."""
    return np.random.default_rng([seed, 1]).permutation(n_nodes).astype(np.int64)


def place(nodes: dict, pods: dict, tp: dict, order: np.ndarray, policy: str, seed: int,
          rank: np.ndarray | None = None, tie_break: str = "name"):
    """One run: per-pod series (arrived, used, frag, idle milli-GPU) and the node index of each pod."""
    arrays = [np.zeros(order.size) for _ in range(4)]
    where = np.full(order.size, -1, dtype=np.int64)
    rank = node_ranks(nodes["gpus"].size, seed) if rank is None else rank
    spec = pods["spec_id"] if "spec_id" in pods else spec_ids(pods)
    run_placement(POLICIES.index(policy), seed, order, spec, pods["cpu"], pods["cpu_nz"], pods["mem"], pods["num"],
                  pods["milli"], pods["mask"], nodes["cpu"], nodes["mem"], nodes["gpus"], nodes["model"], rank,
                  tie_break == "random", tp["cpu"], tp["milli"], tp["num"], tp["mask"], tp["prob"], *arrays, where)
    return arrays, where


TIE_BREAKS = ("name", "random")


def run_protocol(nodes: dict, pods: dict, policies: list[str] | None = None, seeds: list[int] | None = None,
                 ratio: float = TARGET_RATIO, popularity: float = POPULARITY, tie_break: str = "name"
                 ) -> pl.DataFrame:
    """Curves for every (policy, seed): columns policy, seed, arrived_pct, alloc_pct, unallocated_pct,
    frag_rate_pct, pods, placed, failed (pods that fit nowhere, over the whole run).
    ``tie_break``: "name" (the paper's scheduler: one seeded node order per seed, see ``node_ranks``) or
    "random" (upstream Kubernetes: uniform among the best)."""
    policies = policies or POLICIES
    seeds = seeds if seeds is not None else list(range(42, 52))
    for p in policies:
        if p not in POLICIES:
            raise ValueError(f"unknown policy {p!r}; use one of {', '.join(POLICIES)} or 'all'")
    if tie_break not in TIE_BREAKS:
        raise ValueError(f"unknown tie break {tie_break!r}; use one of {', '.join(TIE_BREAKS)}")
    tp = typical_pods(pods, popularity)
    cap = int(nodes["gpus"].sum()) * MILLI
    out = []
    for seed in seeds:
        order = arrival_order(pods, cap, seed, ratio)
        rank = node_ranks(nodes["gpus"].size, seed)
        for pol in policies:
            arrays, where = place(nodes, pods, tp, order, pol, seed, rank, tie_break)
            gpu = pods["milli"][order] > 0
            placed = int(np.count_nonzero(gpu & (where >= 0)))
            gpu_pods = int(np.count_nonzero(gpu))
            cur = discretize(*arrays, capacity_milli=cap).with_columns(
                pl.lit(pol).alias("policy"), pl.lit(seed).alias("seed"),
                pl.lit(int(order.size)).alias("pods"), pl.lit(placed).alias("gpu_pods_placed"),
                pl.lit(gpu_pods - placed).alias("gpu_pods_failed"))
            out.append(cur)
    df = pl.concat(out).with_columns((100.0 - pl.col("alloc_pct")).alias("unallocated_pct"))
    return df.select("policy", "seed", "arrived_pct", "alloc_pct", "unallocated_pct", "frag_rate_pct",
                     "pods", "gpu_pods_placed", "gpu_pods_failed")


def summary_at(curves: pl.DataFrame, pct: int = 130) -> pl.DataFrame:
    """Mean and 95 % interval (t, over seeds) of allocation, unallocated GPUs and fragmentation at ``pct``."""
    from scipy import stats
    rows = []
    for pol in [p for p in POLICIES if p in set(curves.get_column("policy").to_list())]:
        d = curves.filter((pl.col("policy") == pol) & (pl.col("arrived_pct") == pct))
        a = d.get_column("alloc_pct").to_numpy()
        f = d.get_column("frag_rate_pct").to_numpy()
        h = float(stats.t.ppf(0.975, a.size - 1) * a.std(ddof=1) / np.sqrt(a.size)) if a.size > 1 else float("nan")
        rows.append((pol, a.size, float(a.mean()), h, 100.0 - float(a.mean()), float(f.mean())))
    return pl.DataFrame(rows, schema={"policy": pl.Utf8, "seeds": pl.Int64, "alloc_pct": pl.Float64,
                                      "ci95_halfwidth": pl.Float64, "unallocated_pct": pl.Float64,
                                      "frag_rate_pct": pl.Float64}, orient="row")
