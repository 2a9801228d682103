"""ingest/governance.py: the governance TOML is validated whole, loads in one transaction, and re-maps jobs."""
from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest

from cost_helpers import Job, T, add_jobs, load_governance
from ingest import governance
from ingest.errors import InputError

EXAMPLE = Path(__file__).resolve().parent.parent / "data" / "governance.example.toml"


def test_example_file_documents_and_loads_every_section(con, tmp_path):
    s = governance.ingest_path(con, EXAMPLE)
    assert s["rejected"] == 0 and s["loaded"] == s["read"] > 0
    assert con.sql("SELECT count(*) FROM teams").fetchall()[0][0] == 3
    assert con.sql("SELECT team, cost_center, display FROM teams WHERE team = 'vision'").fetchall() == [
        ("vision", "CC-4100", "Computer Vision")]
    assert con.sql("SELECT tz FROM clusters WHERE cluster = 'demo'").fetchall() == [("Europe/Berlin",)]
    g = con.sql("SELECT currency, minor_units, billing_basis, idle_policy, half_life_days, windows_days FROM governance").fetchall()
    assert g == [("EUR", 2, "gpu_hours", "proportional_usage", 7.0, [7, 30])]
    # the h100 base rate is cut on April 1: the first entry ends where the second starts
    rates = con.sql("""SELECT strftime(valid_from, '%Y-%m-%d'), strftime(valid_to, '%Y-%m-%d'), price_per_gpu_hour FROM rates
                       WHERE gpu_type = 'h100' AND partition IS NULL ORDER BY valid_from""").fetchall()
    assert rates == [("2026-01-01", "2026-04-01", Decimal("2.850000")), ("2026-04-01", None, Decimal("2.400000"))]


def test_tco_rate_is_derived_and_the_derivation_is_kept(con):
    governance.ingest_path(con, EXAMPLE)
    price, method, how = con.sql("SELECT price_per_gpu_hour, method, derivation FROM rates WHERE gpu_type = 'a100'").fetchall()[0]
    # 18000 / 4 / 8760 = 0.5136986; 0.55 kW x 1.56 x 0.12 = 0.10296; (400 + 600) / 8760 = 0.1141553
    assert method == "tco" and price == Decimal("0.730814")
    assert "0.513699" in how and "0.102960" in how and "0.114155" in how and "0.730814" in how


def test_tco_with_cost_of_capital_uses_the_capital_recovery_factor():
    chk = governance._Checker("x", "")
    rate, how = governance.tco_rate(chk, ("rates", 0, "tco"), {
        "capex_per_gpu": "10000", "depreciation_years": 5, "interest_rate": "0.05", "power_kw_per_gpu": "0",
        "pue": "1", "price_per_kwh": "0"})
    # CRF = 0.05 * 1.05^5 / (1.05^5 - 1) = 0.2309748; 10000 * CRF / 8760 = 0.263670
    assert rate == Decimal("0.263670") and "CRF" in how


def test_jobs_are_mapped_by_pattern_user_and_priority_and_unmapped_reported(con, tmp_path):
    from models.metrics import cost
    add_jobs(con, tmp_path, [
        Job(1, "vision", 1, T(1), T(2), cluster="demo"), Job(2, "vision-x", 1, T(1), T(2), cluster="demo"),
        Job(3, "llm-7b", 1, T(1), T(2), cluster="demo"), Job(4, "physics", 1, T(1), T(2), user="alice", cluster="demo"),
        Job(5, "shared", 1, T(1), T(2), user="bob", cluster="demo"), Job(6, "shared", 1, T(1), T(2), user="eve", cluster="demo"),
        Job(7, "zeta", 1, T(1), T(2), cluster="demo")])
    governance.ingest_path(con, EXAMPLE)
    teams = dict(con.sql("SELECT job_id, team FROM jobs").fetchall())
    assert teams == {"1": "vision", "2": "vision", "3": "nlp", "4": "nlp", "5": "vision", "6": None, "7": None}
    unmapped = cost.unmapped_accounts(con)
    assert sorted(unmapped["account"].to_list()) == ["shared", "zeta"]
    assert unmapped.filter(unmapped["account"] == "shared")["jobs"].to_list() == [1]


def test_reloading_replaces_everything_and_clears_stale_teams(con, tmp_path):
    add_jobs(con, tmp_path, [Job(1, "vision", 1, T(1), T(2)), Job(2, "ops", 1, T(1), T(2))])
    governance.ingest_path(con, EXAMPLE)
    assert dict(con.sql("SELECT job_id, team FROM jobs").fetchall()) == {"1": "vision", "2": "platform"}
    load_governance(con, tmp_path, '''currency = "USD"
[[teams]]
name = "vision"
accounts = ["vision"]
''')
    assert dict(con.sql("SELECT job_id, team FROM jobs").fetchall()) == {"1": "vision", "2": None}
    assert con.sql("SELECT count(*) FROM teams").fetchall()[0][0] == 1
    assert con.sql("SELECT count(*) FROM rates").fetchall()[0][0] == 0
    assert con.sql("SELECT currency FROM governance").fetchall() == [("USD",)]


BAD = [
    # (replace this, with that, key named in the error, words of the problem)
    ('price_per_gpu_hour = "2.40"', 'price_per_gpu_hour = "2,40"', "rates[1].price_per_gpu_hour", "decimal number"),
    ('pue = "1.56"', 'pue = "0.9"', "rates[3].tco.pue", ">= 1"),
    ('policy = "proportional_usage"', 'policy = "evenly"', "idle.policy", "must be one of"),
    ('basis = "gpu_hours"', 'basis = "cpu_hours"', "billing.basis", "must be one of"),
    ('currency = "EUR"', 'currency = "euro"', "currency", "ISO 4217"),
    ('period_timezone = "UTC"', 'period_timezone = "Mars/Olympus"', "period_timezone", "unknown time zone"),
    ('team = "platform"', 'team = "plattform"', "entitlements[2].team", "not declared"),
    ('share = "0.50"', 'share = "1.5"', "entitlements[1].share", "<= 1"),
    ('share = "0.50"\n', 'share = "0.50"\ngpus = 4\n', "entitlements[1]", "exactly one of"),
    ('cost_center = "CC-9000"', 'cost_center = "CC-9999"', "teams[2].cost_center", "not declared"),
    ('from = 2026-04-01', 'from = 2026-01-01', "rates[1].from", "same date"),
    ('to = 2026-07-01', 'to = 2025-07-01', "entitlements[2].to", "after from"),
    ('windows_days = [7, 30]', 'windows_days = [7, -30]', "fairness.windows_days", "positive"),
    ('minor_units = 2', 'minor_units = 2\nminor_unit = 2', "minor_unit", "unknown key"),
    ('[idle]', '[idle', None, "not valid TOML"),
    ('# tres_weights = "CPU', 'tres_weights = "CPU=x', "billing.tres_weights", "cannot read TRES weight"),
]


@pytest.mark.parametrize("old,new,key,problem", BAD)
def test_a_bad_file_fails_in_one_line_naming_the_key_and_changes_nothing(con, tmp_path, old, new, key, problem):
    governance.ingest_path(con, EXAMPLE)
    before = con.sql("SELECT (SELECT count(*) FROM ingest_runs), (SELECT document FROM governance)").fetchall()
    text = EXAMPLE.read_text()
    assert old in text
    bad = tmp_path / "bad.toml"
    bad.write_text(text.replace(old, new, 1))
    with pytest.raises(InputError) as err:
        governance.ingest_path(con, bad)
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith(f"{bad}:") and problem in msg
    if key:
        assert f"key {key}:" in msg
    assert con.sql("SELECT (SELECT count(*) FROM ingest_runs), (SELECT document FROM governance)").fetchall() == before


def test_error_names_the_line_of_the_key(tmp_path):
    text = EXAMPLE.read_text().replace('pue = "1.56"', 'pue = "0.9"')
    line = next(i for i, ln in enumerate(text.splitlines(), 1) if ln.startswith('pue = "0.9"'))
    with pytest.raises(InputError) as err:
        governance.parse(text, "g.toml")
    assert str(err.value).startswith(f"g.toml:{line}: key rates[3].tco.pue:")


def test_a_parent_loop_is_rejected():
    text = '''currency = "EUR"
[[teams]]
name = "a"
parent = "b"
[[teams]]
name = "b"
parent = "a"
'''
    with pytest.raises(InputError, match=r"key teams\[0\]\.parent: the parent chain of team 'a' loops"):
        governance.parse(text, "g.toml")


def test_overlapping_entitlements_are_rejected():
    text = '''currency = "EUR"
[[teams]]
name = "a"
[[entitlements]]
team = "a"
gpu_type = "h100"
gpus = 4
from = 2026-01-01
to = 2026-03-01
[[entitlements]]
team = "a"
gpu_type = "h100"
gpus = 8
from = 2026-02-01
'''
    with pytest.raises(InputError, match=r"key entitlements\[1\]\.from: overlaps entitlements\[0\]"):
        governance.parse(text, "g.toml")


@pytest.mark.parametrize("text,expected", [
    ("CPU=1.0,Mem=0.25G,GRES/gpu=2.0", {"cpu": 1.0, "mem": 0.25 / 1024, "gpu": 2.0}),
    ("cpu=0.5,GRES/gpu:a100=3,Node=1", {"cpu": 0.5, "gpu:a100": 3.0, "node": 1.0}),
    ("Mem=2", {"mem": 2.0}),
])
def test_tres_billing_weights_in_slurm_syntax(text, expected):
    assert governance.parse_tres_weights(governance._Checker("x", ""), ("w",), text) == pytest.approx(expected)


@pytest.mark.parametrize("text", ["CPU=abc", "License/foo=1", "GRES/gpu=1G", ""])
def test_bad_tres_weights_are_rejected(text):
    with pytest.raises(InputError, match="key w:"):
        governance.parse_tres_weights(governance._Checker("x", ""), ("w",), text)


def test_cli_loads_prints_the_rate_card_and_check_writes_nothing(run_cli, tmp_path, db_path):
    code, out, err = run_cli("ingest", "governance", "--check", str(EXAMPLE))
    assert code == 0 and "valid: 3 teams" in err
    code, out, err = run_cli("ingest", "governance", "--no-refresh", str(EXAMPLE))
    assert code == 0 and "0.730814" in out and "capital 18000" in out
    bad = tmp_path / "bad.toml"
    bad.write_text(EXAMPLE.read_text().replace('policy = "proportional_usage"', 'policy = "evenly"'))
    code, out, err = run_cli("ingest", "governance", str(bad))
    assert code == 1 and err.count("\n") == 1 and "key idle.policy: must be one of" in err


def test_check_and_load_read_a_saved_as_unicode_file_alike(run_cli, tmp_path):
    """A governance file saved by a Windows editor: with a UTF-8 byte-order mark (before, `--check` called it
    "not valid TOML: Invalid statement" at line 1 while loading it worked), or as UTF-16 ("Unicode"). Both are
    valid for `--check` and load; bytes that are not UTF-8 are one error naming the line."""
    text = EXAMPLE.read_text(encoding="utf-8")
    for name, data in (("bom.toml", b"\xef\xbb\xbf" + text.encode()),
                       ("unicode.toml", b"\xff\xfe" + text.replace("\n", "\r\n").encode("utf-16-le"))):
        f = tmp_path / name
        f.write_bytes(data)
        code, _, err = run_cli("ingest", "governance", "--check", str(f))
        assert code == 0 and "valid: 3 teams" in err, err
        code, out, err = run_cli("ingest", "governance", "--no-refresh", str(f))
        assert code == 0 and "capital 18000" in out, err
    latin = tmp_path / "latin1.toml"
    latin.write_bytes(text.encode() + b'\n# Z\xfcrich\n')
    code, _, err = run_cli("ingest", "governance", "--check", str(latin))
    assert code == 1 and err.startswith(f"gpuledger: {latin}:{text.count(chr(10)) + 2}: not UTF-8 text (byte ")
