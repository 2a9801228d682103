"""HTML to PDF with Debian's headless chromium (``--print-to-pdf``): the scheduled reports' PDF is the very HTML
the email carries, printed. No network: the HTML is self-contained (inline CSS, ``data:`` images) and chromium
is started with networking to anything but the local file refused."""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

#: the browser, as the dashboard's browser tests use it; $GPULEDGER_CHROMIUM overrides
CHROMIUM = "/usr/bin/chromium"
TIMEOUT_S = 120


class PdfError(Exception):
    """The PDF could not be made (no chromium, or it failed); the message says why in one line."""


def chromium() -> str:
    path = os.environ.get("GPULEDGER_CHROMIUM") or (CHROMIUM if Path(CHROMIUM).exists() else shutil.which("chromium"))
    if not path:
        raise PdfError("no chromium to print the PDF with (Debian: apt-get install chromium; or set "
                       "$GPULEDGER_CHROMIUM)")
    return path


def html_to_pdf(html: str) -> bytes:
    """Print ``html`` (A4, backgrounds, no header or footer) to PDF bytes."""
    with tempfile.TemporaryDirectory(prefix="gpuledger-pdf-") as d:
        src, out = Path(d) / "report.html", Path(d) / "report.pdf"
        src.write_text(html, encoding="utf-8")
        cmd = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
               "--no-first-run", "--disable-extensions", "--disable-background-networking",
               "--proxy-server=127.0.0.1:9", "--proxy-bypass-list=<-loopback>",   # nothing leaves the machine
               f"--user-data-dir={Path(d) / 'profile'}", "--no-pdf-header-footer", "--run-all-compositor-stages-before-draw",
               f"--print-to-pdf={out}", src.as_uri()]
        try:
            run = subprocess.run(cmd, capture_output=True, timeout=TIMEOUT_S, text=True)
        except subprocess.TimeoutExpired:
            raise PdfError(f"chromium did not print the PDF within {TIMEOUT_S} s") from None
        if not out.exists() or out.stat().st_size == 0:
            last = (run.stderr.strip().splitlines() or ["no output"])[-1]
            raise PdfError(f"chromium exited {run.returncode} without a PDF: {last}")
        return out.read_bytes()
