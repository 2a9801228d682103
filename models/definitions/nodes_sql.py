"""SQL fragments over nodes: what a node_events state means, and node partitions one per row."""
from __future__ import annotations

from models.definitions.labels import NONE

#: node_events states (split on '+') that make a node unavailable, by sreport category; a state made only of
#: AVAILABLE flags is ignored; anything else unknown counts as down (node_events records unavailability).
DOWN_FLAGS = ("DOWN", "DRAIN", "DRAINED", "DRAINING", "FAIL", "FAILING", "NOT_RESPONDING", "NO_RESPOND", "INVAL",
              "INVALID", "UNKNOWN", "ERROR", "REBOOT", "REBOOT_ISSUED", "REBOOT_REQUESTED", "BOOT_FAIL")
PLANNED_FLAGS = ("MAINT", "POWERED_DOWN", "POWER_DOWN", "POWERING_DOWN", "POWERING_UP", "POWER_UP", "FUTURE",
                 "PLANNED")
AVAILABLE_FLAGS = ("IDLE", "ALLOCATED", "ALLOC", "MIXED", "MIX", "COMPLETING", "UP", "RESUME", "RESERVED", "CLOUD",
                   "RES", "PLANNED_IDLE")


def _sql_array(items) -> str:
    return "[" + ", ".join("'" + s + "'" for s in items) + "]"


def event_class_sql(e: str = "e") -> str:
    """sreport category of a node_events state: 'down', 'planned_down', or NULL (not an outage)."""
    flags = f"string_split(upper({e}.state), '+')"
    return f"""
    CASE WHEN list_has_any({flags}, {_sql_array(DOWN_FLAGS)}) THEN 'down'
         WHEN list_has_any({flags}, {_sql_array(PLANNED_FLAGS)}) THEN 'planned_down'
         WHEN list_has_all({_sql_array(AVAILABLE_FLAGS)}, {flags}) THEN NULL
         ELSE 'down' END"""


def explode_partitions(rel_sql: str) -> str:
    """Rows of ``rel_sql`` (with a comma-separated ``partitions`` column) once per partition, as ``partition``.
    A node in several partitions counts in each: partition rows overlap, the cluster row counts it once."""
    return (f"SELECT * EXCLUDE (partitions), coalesce(trim(p), '{NONE}') AS partition "
            f"FROM (SELECT *, unnest(CASE WHEN partitions IS NULL OR partitions = '' THEN [NULL] "
            f"ELSE string_split(partitions, ',') END) AS p FROM ({rel_sql}))")
