"""Write the synthetic site's governance file in the format of data/governance.example.toml.

Teams map to their Slurm accounts and cost centres; each team's entitlement is split over the pools by where
it asks to run, normalised so every pool's shares sum to 1; the H100 list price drops after the capacity
addition; the A100 rate is derived from TCO inputs; the preemptible partition is discounted.
"""
from __future__ import annotations

import datetime as dt
from decimal import ROUND_HALF_EVEN, Decimal

from models.demo.config import GPUS_PER_NODE, Config

COST_CENTER_NAMES = {
    "CC-4100": "Generative AI", "CC-4200": "Perception", "CC-4300": "Recommendations", "CC-4400": "Robotics",
    "CC-4500": "Research", "CC-4600": "Life Sciences", "CC-4700": "Inference Platform",
    "CC-4800": "ML Infrastructure", "CC-4900": "University Programme",
}
PARENTS = {"llm-pretrain": "genai", "llm-finetune": "genai", "safety": "genai", "vision": "labs",
           "speech": "labs", "research": "labs", "bioml": "labs", "students": "labs",
           "recsys": "product", "robotics": "product", "inference": "platform", "infra": "platform"}


def _q(x: float, places: str = "0.0001") -> str:
    return str(Decimal(repr(x)).quantize(Decimal(places), rounding=ROUND_HALF_EVEN))


def pool_shares(cfg: Config) -> dict[str, dict[str, Decimal]]:
    """{pool: {team: share}}: entitlement split by each team's pool preference, shares of a pool sum to 1."""
    weights = {}
    for t in cfg.teams:
        h = t.h100 * (1 - t.preempt)
        weights[t.name] = {"h100": t.entitlement * h, "a100": t.entitlement * (1 - h)}
    out = {}
    for pool in (p.name for p in cfg.pools):
        total = sum(w[pool] for w in weights.values())
        shares = {name: Decimal(_q(w[pool] / total)) for name, w in weights.items() if w[pool] > 0}
        # put the rounding residue on the largest share so the pool sums to exactly 1
        top = max(shares, key=shares.get)
        shares[top] += Decimal(1) - sum(shares.values())
        out[pool] = shares
    return out


def governance_toml(cfg: Config, price_cut: dt.date) -> str:
    start = cfg.start.isoformat()
    lines = [
        "# Governance of the synthetic demo site (written by `gpuledger demo`; format: data/governance.example.toml)",
        'currency = "USD"', "minor_units = 2",
        f'period_timezone = "{cfg.tz}"   # finance closes calendar months in the site\'s zone', "",
        "[[clusters]]", f'name = "{cfg.cluster}"',
        'timezone = "UTC"             # the accounting exports are taken with TZ=UTC',
        f'description = "Synthetic shared GPU training cluster (seed {cfg.seed}, scale {cfg.scale:g})"', "",
    ]
    for cc in sorted({t.cost_center for t in cfg.teams}):
        lines += ["[[cost_centers]]", f'id = "{cc}"', f'name = "{COST_CENTER_NAMES.get(cc, cc)}"', ""]
    for t in cfg.teams:
        lines += ["[[teams]]", f'name = "{t.name}"', f'display = "{t.display}"', f'cost_center = "{t.cost_center}"',
                  f'accounts = ["{t.account}"]', f"fairshare = {max(1, round(t.entitlement * 100))}",
                  f'parent = "{PARENTS.get(t.name, "labs")}"', ""]
    for pool, shares in pool_shares(cfg).items():
        for team, share in shares.items():
            lines += ["[[entitlements]]", f'team = "{team}"', f'gpu_type = "{pool}"', f'share = "{share}"',
                      f"from = {start}", ""]
    lines += [
        "[[rates]]", 'gpu_type = "h100"', 'price_per_gpu_hour = "2.60"', f"from = {start}",
        f"to = {price_cut.isoformat()}", "",
        "[[rates]]", 'gpu_type = "h100"', 'price_per_gpu_hour = "2.35"   # renegotiated with the new nodes',
        f"from = {price_cut.isoformat()}", "",
        "[[rates]]", 'gpu_type = "h100"', 'partition = "preempt"', 'price_per_gpu_hour = "1.10"', f"from = {start}", "",
        "[[rates]]", 'gpu_type = "a100"', 'partition = "preempt"', 'price_per_gpu_hour = "0.55"', f"from = {start}", "",
        "[[rates]]", 'gpu_type = "a100"', f"from = {start}", "[rates.tco]",
        'capex_per_gpu = "16000"', "depreciation_years = 4", 'interest_rate = "0.05"', 'power_kw_per_gpu = "0.55"',
        'pue = "1.4"', 'price_per_kwh = "0.11"', 'facility_per_gpu_year = "450"', 'staff_per_gpu_year = "700"', "",
        "[billing]", 'basis = "gpu_hours"', "",
        "[idle]", 'policy = "proportional_usage"', "",
        "[fairness]", "half_life_days = 7", "windows_days = [7, 30]", "starvation_hours = 24",
        "bsld_tau_minutes = 10", "",
    ]
    return "\n".join(lines + budgets(cfg))


#: GPU-hours in an average calendar month (365.25 x 24 / 12)
MONTH_HOURS = 730.5


def budgets(cfg: Config) -> list[str]:
    """Each team's monthly budget in GPU-hours: its entitled share of the GPUs installed at the start, for a
    whole month, to the hundred (finance budgets the entitlement; a team above it is forecast over budget)."""
    gpus = sum(p.nodes for p in cfg.pools) * GPUS_PER_NODE
    lines = ["# a budget per team: its entitlement's GPU-hours per month (`gpuledger report budgets`)"]
    for t in cfg.teams:
        lines += ["[[budgets]]", f'team = "{t.name}"', 'period = "month"',
                  f"gpu_hours = {max(100, round(t.entitlement * gpus * MONTH_HOURS, -2)):.0f}",
                  f'from = "{cfg.start:%Y-%m}"', ""]
    return lines
