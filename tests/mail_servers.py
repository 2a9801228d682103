"""Real receivers on 127.0.0.1 for delivery tests: an SMTP server (aiosmtpd, optionally STARTTLS + AUTH with a
self-signed certificate made by openssl) and an HTTP server that records webhook POSTs.

    with smtp_server(tls_dir=tmp_path) as mail:          # mail.settings(): SmtpSettings pointing at it
        send_email(mail.settings(), ["a@example.org"], msg)
        mail.wait(1); mail.messages[0]["Subject"]        # email.message.EmailMessage objects

    with http_receiver(fail_first=2) as hook:              # the first 2 POSTs answer 503
        post_webhook(Webhook("x", hook.url, "slack"), msg); hook.bodies[0]  # parsed JSON

Used by tests/test_delivery.py and tests/test_alerts.py; reusable by any test that sends mail or webhooks.
"""
from __future__ import annotations

import contextlib
import email
import email.policy
import json
import socket
import ssl
import subprocess
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword

from models.service.delivery import SmtpSettings

USER, PASSWORD = "alerts@example.org", "s3cret-for-tests"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def unreachable_port() -> int:
    """A port on 127.0.0.1 with nothing listening (connections are refused)."""
    return free_port()


def self_signed(tls_dir: Path) -> tuple[Path, Path]:
    """(cert, key) for CN=localhost / IP 127.0.0.1, made by openssl in ``tls_dir``."""
    cert, key = tls_dir / "smtp-cert.pem", tls_dir / "smtp-key.pem"
    if not cert.exists():
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                        "-subj", "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost",
                        "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    return cert, key


@dataclass
class MailBox:
    """What the SMTP server received; ``refuse_first`` answers the first N DATA commands with 451."""
    host: str = "127.0.0.1"
    port: int = 0
    ca_file: str = ""
    security: str = "none"
    refuse_first: int = 0
    messages: list = field(default_factory=list)
    envelopes: list = field(default_factory=list)       # (mail_from, [rcpt_tos], authenticated login or None)
    refused: int = 0
    cond: threading.Condition = field(default_factory=threading.Condition)

    async def handle_DATA(self, server, session, envelope):        # aiosmtpd's handler hook
        with self.cond:
            if self.refused < self.refuse_first:
                self.refused += 1
                return "451 4.3.0 try again later"
            msg = email.message_from_bytes(envelope.original_content or envelope.content,
                                           policy=email.policy.default)
            auth = session.auth_data if session.authenticated else None
            login = auth.login.decode() if isinstance(auth, LoginPassword) else None
            self.messages.append(msg)
            self.envelopes.append((envelope.mail_from, list(envelope.rcpt_tos), login))
            self.cond.notify_all()
        return "250 OK"

    @staticmethod
    def body(msg, kind: str = "plain") -> str:
        """The text/plain (or html) part as sent, with SMTP's CRLF line ends back to LF."""
        return msg.get_body((kind,)).get_content().replace("\r\n", "\n")

    def settings(self, **kw) -> SmtpSettings:
        base = dict(host=self.host, port=self.port, security=self.security, ca_file=self.ca_file,
                    sender="gpuledger@example.org", timeout_s=5.0, retries=2, backoff_s=0.05)
        return SmtpSettings(**{**base, **kw})

    def wait(self, n: int, timeout: float = 10.0) -> list:
        with self.cond:
            self.cond.wait_for(lambda: len(self.messages) >= n, timeout)
        return self.messages


def _authenticator(server, session, envelope, mechanism, auth_data):
    ok = isinstance(auth_data, LoginPassword) and (auth_data.login.decode(), auth_data.password.decode()) == \
        (USER, PASSWORD)
    return AuthResult(success=ok, handled=False, auth_data=auth_data if ok else None)


@contextlib.contextmanager
def smtp_server(tls_dir: Path | None = None, refuse_first: int = 0, port: int | None = None):
    """A real aiosmtpd server on 127.0.0.1 (on ``port``, default a free one). With ``tls_dir``: STARTTLS
    required, AUTH (USER/PASSWORD) required."""
    box = MailBox(port=port or free_port(), refuse_first=refuse_first)
    kwargs: dict = {}
    if tls_dir is not None:
        cert, key = self_signed(Path(tls_dir))
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(cert, key)
        kwargs = dict(tls_context=ctx, require_starttls=True, authenticator=_authenticator, auth_required=True,
                      auth_require_tls=True)
        box.ca_file, box.security = str(cert), "starttls"
    ctl = Controller(box, hostname="127.0.0.1", port=box.port, **kwargs)
    ctl.start()
    try:
        yield box
    finally:
        ctl.stop()


@dataclass
class Receiver:
    url: str = ""
    fail_first: int = 0
    status: int = 503
    requests: list = field(default_factory=list)     # (path, headers dict, raw body) of successful POSTs
    failed: int = 0
    cond: threading.Condition = field(default_factory=threading.Condition)

    @property
    def bodies(self) -> list:
        return [json.loads(b) for _, _, b in self.requests]

    def wait(self, n: int, timeout: float = 10.0) -> list:
        with self.cond:
            self.cond.wait_for(lambda: len(self.requests) >= n, timeout)
        return self.bodies


@contextlib.contextmanager
def http_receiver(fail_first: int = 0, status: int = 503):
    """A real HTTP server on 127.0.0.1 recording POSTs; the first ``fail_first`` answer ``status``."""
    rec = Receiver(fail_first=fail_first, status=status)

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):                     # noqa: N802 -- http.server's name
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            with rec.cond:
                if rec.failed < rec.fail_first:
                    rec.failed += 1
                    code = rec.status
                else:
                    rec.requests.append((self.path, dict(self.headers), body))
                    rec.cond.notify_all()
                    code = 200
            self.send_response(code)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args):
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    rec.url = f"http://127.0.0.1:{srv.server_address[1]}/hook"
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        yield rec
    finally:
        srv.shutdown()
        srv.server_close()
        t.join(timeout=5)


def wait_until(pred, timeout: float = 10.0, step: float = 0.05) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(step)
    return pred()
