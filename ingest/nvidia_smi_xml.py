"""`nvidia-smi -q -x` (XML) snapshots as the `--query-gpu` CSV lines `ingest nvidia-smi` reads.

Telegraf's nvidia_smi input and many node scripts log `nvidia-smi -q -x` (with `-l N`, one document per
interval, concatenated). Each ``<gpu>`` of each document becomes one reading in :data:`FIELDS` order: the
document's ``<timestamp>`` (the host's local time, as the CSV's), the GPU's position in the document (nvidia-smi
lists GPUs in index order), its UUID and name, and the GPU-level utilization, framebuffer memory used, power
draw and temperature (not the MIG devices' own memory: those sit deeper in the tree). A value nvidia-smi prints
as ``N/A`` stays "no reading". The run counts GPU readings, not the XML's text lines.
"""
from __future__ import annotations

import datetime as dt
import re
import xml.etree.ElementTree as ET

from ingest.errors import InputError

#: the query list the readings are written in (`ingest nvidia-smi --fields`)
FIELDS = "timestamp,index,uuid,name,utilization.gpu,memory.used,power.draw,temperature.gpu"
#: where each reading sits under <gpu>, first found wins (the power element moved between driver versions)
PATHS = {"utilization.gpu": ("utilization/gpu_util",), "memory.used": ("fb_memory_usage/used",),
         "power.draw": ("gpu_power_readings/power_draw", "gpu_power_readings/instant_power_draw",
                        "power_readings/power_draw"),
         "temperature.gpu": ("temperature/gpu_temp",)}
_DOC = re.compile(rb"<nvidia_smi_log\b.*?</nvidia_smi_log>", re.S)


def _value(gpu: ET.Element, paths: tuple[str, ...]) -> str:
    for p in paths:
        el = gpu.find(p)
        if el is not None and el.text and el.text.strip():
            return el.text.strip()
    return "[N/A]"


def _stamp(text: str | None, name: str, n: int) -> str:
    """ "Fri Aug  4 11:44:30 2023" as the CSV's "2023/08/04 11:44:30.000" (local time, read with --tz)."""
    try:
        t = dt.datetime.strptime(" ".join((text or "").split()), "%a %b %d %H:%M:%S %Y")
    except ValueError:
        raise InputError(name, f"document {n}: <timestamp> {text!r} is not nvidia-smi's time") from None
    return t.strftime("%Y/%m/%d %H:%M:%S.000")


def to_query_csv(data: bytes, name: str) -> bytes:
    """Every GPU of every ``<nvidia_smi_log>`` document in ``data`` as a CSV line in :data:`FIELDS`."""
    docs = _DOC.findall(bytes(data))
    if not docs:
        raise InputError(name, "no <nvidia_smi_log> document (nvidia-smi -q -x output)")
    out = []
    for n, raw in enumerate(docs, start=1):
        try:
            root = ET.fromstring(raw)
        except ET.ParseError as exc:
            raise InputError(name, f"document {n}: not well-formed XML: {exc}") from None
        stamp = _stamp(root.findtext("timestamp"), name, n)
        for index, gpu in enumerate(root.findall("gpu")):
            vals = [stamp, str(index), gpu.findtext("uuid") or "[N/A]", gpu.findtext("product_name") or "[N/A]",
                    *(_value(gpu, PATHS[f]) for f in FIELDS.split(",")[4:])]
            out.append(", ".join(v.replace(",", " ") for v in vals))
    return ("\n".join(out) + ("\n" if out else "")).encode()
