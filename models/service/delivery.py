"""Delivery: email over SMTP and webhooks (generic JSON, Slack, Microsoft Teams), rendered from site-editable
Jinja2 templates. Alerts (models/service/alerts.py) and scheduled reports send through here.

- **Never fatal.** :func:`send_email` and :func:`post_webhook` retry transient failures (connection refused or
  reset, timeouts, SMTP 4xx, HTTP 5xx/429) with exponential backoff and then return a :class:`Delivery` whose
  ``error`` says why in one line; they raise only for a caller's mistake (no recipients, unknown shape).
  A permanent refusal (SMTP 5xx, HTTP 4xx) is not retried: sending it again would be refused again.
- **Credentials only from the environment**: ``GPULEDGER_SMTP_USER`` and ``GPULEDGER_SMTP_PASSWORD`` (AUTH after
  STARTTLS; AUTH is never sent over a plain connection). Webhook URLs carry their own secret (Slack, Teams) and
  live in the service config, which a site keeps private like any other credential file.
- **Templates**: ``<name>.subject.j2``, ``<name>.txt.j2`` and optionally ``<name>.html.j2``, looked up first in the
  site's ``template_dir`` then in models/service/templates/ (copy one there to edit it).
"""
from __future__ import annotations

import json
import logging
import os
import smtplib
import socket
import ssl
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from email.message import EmailMessage
from email.utils import formatdate, make_msgid
from pathlib import Path

import jinja2

log = logging.getLogger("gpuledger.delivery")

TEMPLATES = Path(__file__).resolve().parent / "templates"
SHAPES = ("json", "slack", "teams")
USER_ENV, PASSWORD_ENV = "GPULEDGER_SMTP_USER", "GPULEDGER_SMTP_PASSWORD"


@dataclass(frozen=True)
class SmtpSettings:
    """Where and how mail leaves. ``security``: ``starttls`` (upgrade, certificate verified against the system's
    CAs or ``ca_file``), ``tls`` (implicit TLS, port 465) or ``none`` (a local relay on a trusted network)."""
    host: str = "localhost"
    port: int = 587
    security: str = "starttls"
    sender: str = "gpuledger@localhost"
    ca_file: str = ""
    timeout_s: float = 30.0
    retries: int = 3                   # attempts after the first
    backoff_s: float = 5.0             # first wait; doubles per retry


@dataclass(frozen=True)
class Webhook:
    """One webhook target: a URL and the body shape it expects (one of :data:`SHAPES`)."""
    name: str
    url: str
    shape: str = "json"
    timeout_s: float = 15.0
    retries: int = 3
    backoff_s: float = 5.0


@dataclass(frozen=True)
class Message:
    """What is said, independent of the channel: a subject, a plain-text body, an optional HTML body, the facts
    (for webhook bodies and machine readers) and attachments ``(filename, bytes, mime type)``."""
    subject: str
    text: str
    html: str = ""
    facts: dict = field(default_factory=dict)
    attachments: tuple = ()
    #: images the HTML shows as ``src="cid:CID"``: ``(cid, bytes, mime type)``, sent as related parts of the HTML
    #: (mail clients that block ``data:`` images show these; scheduled reports, models/service/reports.py)
    inline: tuple = ()


@dataclass(frozen=True)
class Delivery:
    """The outcome of one delivery: ``ok``, attempts made, the last error (one line) and when it ended (Unix s)."""
    channel: str
    target: str
    ok: bool
    attempts: int
    error: str = ""
    at: float = 0.0


class _Permanent(Exception):
    """A refusal that another attempt would meet again."""


# ------------------------------------------------------------------ templates

def environment(template_dir: str | Path | None = None) -> jinja2.Environment:
    """A Jinja2 environment: the site's directory first, then the packaged defaults. Undefined names fail loudly
    (a typo in a site's template must not send an email with a blank where the number was)."""
    dirs = [str(template_dir)] if template_dir else []
    return jinja2.Environment(loader=jinja2.FileSystemLoader([*dirs, str(TEMPLATES)]),
                              undefined=jinja2.StrictUndefined, autoescape=jinja2.select_autoescape(["html.j2"]),
                              trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)


def render(name: str, context: dict, template_dir: str | Path | None = None, facts: dict | None = None) -> Message:
    """The :class:`Message` of template ``name`` for ``context`` (HTML only when ``<name>.html.j2`` exists)."""
    env = environment(template_dir)
    subject = " ".join(env.get_template(f"{name}.subject.j2").render(context).split())
    text = env.get_template(f"{name}.txt.j2").render(context)
    try:
        html = env.get_template(f"{name}.html.j2").render(context)
    except jinja2.TemplateNotFound:
        html = ""
    return Message(subject, text, html, facts if facts is not None else {})


# ------------------------------------------------------------------ email

def smtp_credentials() -> tuple[str, str] | None:
    """(user, password) from the environment, or None when AUTH is not configured."""
    user, password = os.environ.get(USER_ENV, ""), os.environ.get(PASSWORD_ENV, "")
    return (user, password) if user else None


def email_message(smtp: SmtpSettings, to: list[str], msg: Message) -> EmailMessage:
    em = EmailMessage()
    em["From"], em["To"], em["Subject"] = smtp.sender, ", ".join(to), msg.subject
    em["Date"], em["Message-ID"] = formatdate(usegmt=True), make_msgid(domain=smtp.sender.rpartition("@")[2] or None)
    em.set_content(msg.text)
    if msg.html:
        em.add_alternative(msg.html, subtype="html")
        html = em.get_body(("html",))
        for cid, data, mime in msg.inline:
            main, _, sub = mime.partition("/")
            html.add_related(data, maintype=main, subtype=sub, cid=f"<{cid}>", disposition="inline")
    for name, data, mime in msg.attachments:
        main, _, sub = mime.partition("/")
        em.add_attachment(data, maintype=main, subtype=sub or "octet-stream", filename=name)
    return em


def _tls_context(smtp: SmtpSettings) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=smtp.ca_file or None)


def _smtp_once(smtp: SmtpSettings, to: list[str], em: EmailMessage) -> None:
    if smtp.security == "tls":
        client = smtplib.SMTP_SSL(smtp.host, smtp.port, timeout=smtp.timeout_s, context=_tls_context(smtp))
    else:
        client = smtplib.SMTP(smtp.host, smtp.port, timeout=smtp.timeout_s)
    with client:
        client.ehlo()
        if smtp.security == "starttls":
            client.starttls(context=_tls_context(smtp))
            client.ehlo()
        creds = smtp_credentials()
        if creds:
            if smtp.security == "none":
                raise _Permanent(f"{USER_ENV} is set but security is 'none': refusing to send AUTH in clear text")
            client.login(*creds)
        client.send_message(em, from_addr=smtp.sender, to_addrs=to)


def _smtp_error(exc: Exception) -> tuple[bool, str]:
    """(transient?, one line) for an exception met while sending mail."""
    if isinstance(exc, _Permanent):
        return False, str(exc)
    if isinstance(exc, smtplib.SMTPAuthenticationError):
        return False, f"SMTP AUTH refused: {exc.smtp_code} {exc.smtp_error.decode(errors='replace')}"
    if isinstance(exc, smtplib.SMTPRecipientsRefused):
        codes = {c for c, _ in exc.recipients.values()}
        return all(400 <= c < 500 for c in codes), f"recipients refused: {', '.join(sorted(exc.recipients))}"
    if isinstance(exc, smtplib.SMTPResponseException):
        return 400 <= exc.smtp_code < 500, f"SMTP {exc.smtp_code} {exc.smtp_error.decode(errors='replace')}"
    if isinstance(exc, ssl.SSLCertVerificationError):
        return False, f"TLS certificate not trusted: {exc.verify_message}"
    if isinstance(exc, (OSError, smtplib.SMTPException)):
        return True, f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else 'connection failed'}"
    raise exc


def send_email(smtp: SmtpSettings, to: list[str], msg: Message, sleep=time.sleep) -> Delivery:
    """Send ``msg`` to ``to`` with retries (waits ``backoff_s * 2^k``); a :class:`Delivery`, never an exception
    for the server's or network's failures."""
    if not to:
        raise ValueError("send_email: no recipients")
    em = email_message(smtp, to, msg)
    target = f"{','.join(to)} via {smtp.host}:{smtp.port}"
    return _with_retries("email", target, smtp.retries, smtp.backoff_s, lambda: _smtp_once(smtp, to, em),
                         _smtp_error, sleep)


# ------------------------------------------------------------------ webhooks

def webhook_body(shape: str, msg: Message) -> dict:
    """The JSON body of ``msg`` for a webhook of ``shape``: ``json`` (subject, text, facts), ``slack`` (an
    incoming webhook's ``text`` plus blocks) or ``teams`` (a message with one Adaptive Card, as Teams' incoming
    webhooks and Workflows accept)."""
    if shape == "json":
        return {"subject": msg.subject, "text": msg.text, "facts": msg.facts}
    if shape == "slack":
        return {"text": f"*{msg.subject}*\n{msg.text}",
                "blocks": [{"type": "header", "text": {"type": "plain_text", "text": msg.subject[:150]}},
                           {"type": "section", "text": {"type": "mrkdwn", "text": msg.text[:3000]}}]}
    if shape == "teams":
        card = {"$schema": "http://adaptivecards.io/schemas/adaptive-card.json", "type": "AdaptiveCard",
                "version": "1.4",
                "body": [{"type": "TextBlock", "text": msg.subject, "weight": "Bolder", "size": "Medium",
                          "wrap": True},
                         {"type": "TextBlock", "text": msg.text, "wrap": True}]}
        return {"type": "message", "attachments": [{"contentType": "application/vnd.microsoft.card.adaptive",
                                                    "contentUrl": None, "content": card}]}
    raise ValueError(f"webhook shape must be one of {', '.join(SHAPES)}, not {shape!r}")


def _post_once(hook: Webhook, body: bytes) -> None:
    req = urllib.request.Request(hook.url, data=body, method="POST",
                                 headers={"Content-Type": "application/json", "User-Agent": "gpuledger"})
    with urllib.request.urlopen(req, timeout=hook.timeout_s) as resp:
        resp.read()


def _http_error(exc: Exception) -> tuple[bool, str]:
    if isinstance(exc, urllib.error.HTTPError):
        return exc.code >= 500 or exc.code == 429, f"HTTP {exc.code} {exc.reason}"
    if isinstance(exc, urllib.error.URLError):
        return True, f"unreachable: {exc.reason}"
    if isinstance(exc, (OSError, socket.timeout)):
        return True, f"{type(exc).__name__}: {exc}"
    raise exc


def post_webhook(hook: Webhook, msg: Message, sleep=time.sleep) -> Delivery:
    """POST ``msg`` in ``hook.shape`` with retries; a :class:`Delivery`, never an exception for the network's."""
    body = json.dumps(webhook_body(hook.shape, msg), default=str).encode()
    return _with_retries("webhook", hook.name, hook.retries, hook.backoff_s, lambda: _post_once(hook, body),
                         _http_error, sleep)


# ------------------------------------------------------------------ retries

def _with_retries(channel: str, target: str, retries: int, backoff_s: float, attempt, classify, sleep) -> Delivery:
    error = ""
    for n in range(retries + 1):
        if n:
            sleep(backoff_s * 2 ** (n - 1))
        try:
            attempt()
            return Delivery(channel, target, True, n + 1, "", time.time())
        except Exception as exc:            # noqa: BLE001 -- classify re-raises what is not a delivery failure
            transient, error = classify(exc)
            log.warning("%s to %s failed (attempt %d of %d): %s", channel, target, n + 1, retries + 1, error)
            if not transient:
                return Delivery(channel, target, False, n + 1, error, time.time())
    return Delivery(channel, target, False, retries + 1, error, time.time())
