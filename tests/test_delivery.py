"""models/service/delivery.py against real receivers on 127.0.0.1 (tests/mail_servers.py): an aiosmtpd server with
STARTTLS and AUTH, and an HTTP server recording webhook POSTs."""
from __future__ import annotations

import time

import pytest

from models.service import delivery
from models.service.delivery import Message, SmtpSettings, Webhook, post_webhook, render, send_email
from mail_servers import PASSWORD, USER, http_receiver, smtp_server, unreachable_port

MSG = Message("3 GPUs idle", "team vision: 64.25 idle GPU-h\n", "<p>64.25</p>", {"idle_gpu_hours": 64.25},
              (("figures.csv", b"team,idle\nvision,64.25\n", "text/csv"),))


@pytest.fixture
def creds(monkeypatch):
    monkeypatch.setenv(delivery.USER_ENV, USER)
    monkeypatch.setenv(delivery.PASSWORD_ENV, PASSWORD)


def test_starttls_auth_delivers_text_html_and_attachment(tmp_path, creds):
    with smtp_server(tls_dir=tmp_path) as mail:
        d = send_email(mail.settings(), ["lead@example.org", "fin@example.org"], MSG)
        got = mail.wait(1)
    assert d.ok and d.attempts == 1 and d.error == ""
    assert mail.envelopes == [("gpuledger@example.org", ["lead@example.org", "fin@example.org"], USER)]
    m = got[0]
    assert m["Subject"] == "3 GPUs idle" and m["To"] == "lead@example.org, fin@example.org"
    assert mail.body(m) == "team vision: 64.25 idle GPU-h\n" and mail.body(m, "html").strip() == "<p>64.25</p>"
    att = [p for p in m.iter_attachments()]
    assert [(a.get_filename(), a.get_payload(decode=True)) for a in att] == [("figures.csv", b"team,idle\nvision,64.25\n")]


def test_wrong_password_is_permanent_not_retried(tmp_path, monkeypatch):
    monkeypatch.setenv(delivery.USER_ENV, USER)
    monkeypatch.setenv(delivery.PASSWORD_ENV, "wrong")
    with smtp_server(tls_dir=tmp_path) as mail:
        d = send_email(mail.settings(retries=3), ["a@example.org"], MSG)
    assert not d.ok and d.attempts == 1 and d.error.startswith("SMTP AUTH refused: 535")
    assert mail.messages == []


def test_untrusted_certificate_is_refused(tmp_path, creds):
    """Without the test CA the self-signed certificate fails verification: nothing is sent, AUTH never leaves."""
    with smtp_server(tls_dir=tmp_path) as mail:
        d = send_email(mail.settings(ca_file=""), ["a@example.org"], MSG)
    assert not d.ok and d.attempts == 1 and "certificate" in d.error and mail.messages == []


def test_no_auth_over_plain_connection(monkeypatch):
    monkeypatch.setenv(delivery.USER_ENV, USER)
    monkeypatch.setenv(delivery.PASSWORD_ENV, PASSWORD)
    with smtp_server() as mail:
        d = send_email(mail.settings(), ["a@example.org"], MSG)
    assert not d.ok and "clear text" in d.error and mail.messages == []


def test_unreachable_smtp_is_retried_with_backoff_and_reported():
    smtp = SmtpSettings(host="127.0.0.1", port=unreachable_port(), security="none", timeout_s=2, retries=2,
                        backoff_s=0.1)
    t0 = time.monotonic()
    d = send_email(smtp, ["a@example.org"], MSG)
    assert time.monotonic() - t0 >= 0.1 + 0.2           # two waits: 0.1 s then 0.2 s
    assert not d.ok and d.attempts == 3 and "ConnectionRefusedError" in d.error


def test_transient_451_is_retried_then_delivered():
    with smtp_server(refuse_first=2) as mail:
        d = send_email(mail.settings(retries=2), ["a@example.org"], MSG)
        mail.wait(1)
    assert d.ok and d.attempts == 3 and mail.refused == 2 and len(mail.messages) == 1


def test_no_recipients_is_the_callers_mistake():
    with pytest.raises(ValueError, match="no recipients"):
        send_email(SmtpSettings(), [], MSG)


@pytest.mark.parametrize("shape", delivery.SHAPES)
def test_webhook_shapes_reach_a_real_receiver(shape):
    with http_receiver() as hook:
        d = post_webhook(Webhook("ops", hook.url, shape, retries=0), MSG)
        body = hook.wait(1)[0]
    assert d.ok and d.attempts == 1
    assert hook.requests[0][1]["Content-Type"] == "application/json"
    if shape == "json":
        assert body == {"subject": "3 GPUs idle", "text": "team vision: 64.25 idle GPU-h\n",
                        "facts": {"idle_gpu_hours": 64.25}}
    elif shape == "slack":
        assert body["text"] == "*3 GPUs idle*\nteam vision: 64.25 idle GPU-h\n"
        assert body["blocks"][0]["text"]["text"] == "3 GPUs idle"
    else:
        card = body["attachments"][0]
        assert body["type"] == "message" and card["contentType"] == "application/vnd.microsoft.card.adaptive"
        assert [b["text"] for b in card["content"]["body"]] == ["3 GPUs idle", "team vision: 64.25 idle GPU-h\n"]


def test_webhook_503_retried_404_not():
    with http_receiver(fail_first=2, status=503) as hook:
        d = post_webhook(Webhook("ops", hook.url, "json", retries=2, backoff_s=0.05), MSG)
    assert d.ok and d.attempts == 3 and len(hook.requests) == 1
    with http_receiver(fail_first=5, status=404) as hook:
        d = post_webhook(Webhook("ops", hook.url, "json", retries=3, backoff_s=0.05), MSG)
    assert not d.ok and d.attempts == 1 and d.error == "HTTP 404 Not Found" and hook.failed == 1


def test_unreachable_webhook_reported():
    d = post_webhook(Webhook("ops", f"http://127.0.0.1:{unreachable_port()}/x", "slack", timeout_s=2, retries=1,
                             backoff_s=0.05), MSG)
    assert not d.ok and d.attempts == 2 and d.error.startswith("unreachable:")


def test_site_template_overrides_packaged_one(tmp_path):
    ctx = {"recipient": "ana", "dashboard_url": "", "resolved": [],
           "firing": [{"summary": "vision idle 64.25 GPU-h", "rule": "idle", "kind": "idle_gpu_hours",
                       "since": "2026-03-07 10:00", "lines": ["job 17 (bob): 12.5 GPU-h at 0 %"]}]}
    packaged = render("digest", ctx)
    assert packaged.subject == "[gpuledger] 1 alert firing: vision idle 64.25 GPU-h"
    assert "    job 17 (bob): 12.5 GPU-h at 0 %\n" in packaged.text and "<b>vision idle 64.25 GPU-h</b>" in packaged.html
    (tmp_path / "digest.subject.j2").write_text("Site: {{ firing[0].summary }}")
    site = render("digest", ctx, tmp_path)
    assert site.subject == "Site: vision idle 64.25 GPU-h" and site.text == packaged.text


def test_template_typo_fails_loudly(tmp_path):
    (tmp_path / "digest.subject.j2").write_text("{{ firng }}")
    with pytest.raises(Exception, match="firng"):
        render("digest", {"firing": [], "resolved": []}, tmp_path)


def test_html_is_escaped_text_is_not_and_the_subject_is_one_line():
    ctx = {"recipient": "ana", "dashboard_url": "", "resolved": [],
           "firing": [{"summary": "team <script>x</script>\nBcc: evil@example.org", "rule": "r", "kind": "budget",
                       "since": "2026-03-07 10:00", "lines": []}]}
    m = render("digest", ctx)
    assert "&lt;script&gt;" in m.html and "<script>" not in m.html
    assert "team <script>x</script>" in m.text
    assert "\n" not in m.subject and m.subject.endswith("team <script>x</script> Bcc: evil@example.org")
