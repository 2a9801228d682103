"""Storage: the DuckDB warehouse file, its schema, transactions, the ingest audit, mart state and the serving
snapshot. The bottom layer: it imports nothing of gpuledger's, and everything else imports it.

The names below are the storage API (``from ingest import warehouse; warehouse.connect(...)``); each lives in
the module that owns it.
"""
from ingest.warehouse.audit import IngestAccountingError, IngestRun, get_watermark, nothing_loaded, set_watermark
from ingest.warehouse.base import ENV_MEMORY_LIMIT, WarehouseError, bounded_memory, transaction, utcnow
from ingest.warehouse.connection import DEFAULT_DB, ENV_DB, ENV_LOCK_TIMEOUT, connect, resolve_path
from ingest.warehouse.mart_state import is_current, mart_run, newest_run, record_mart, states_of
from ingest.warehouse.mart_state import clear_mart_changes, mart_changes, note_mart_change
from ingest.warehouse.query import execute, frame, has_table, known_clusters, only_cluster
from ingest.warehouse.schema import IDLE_EPSILON, migrate, migration_files, schema_version
from ingest.warehouse.times import TimeParseError, parse_time
from ingest.warehouse.serving import (PARTITIONS, SERVING_EXCLUDE, WHOLE, collect_garbage, note_changed,
                                      publish_serving, read_manifest, remove_orphaned_snapshots, serving_dir,
                                      serving_path, table_names)

__all__ = ["IngestAccountingError", "IngestRun", "get_watermark", "set_watermark", "ENV_MEMORY_LIMIT", "WarehouseError",
           "bounded_memory", "transaction", "utcnow", "DEFAULT_DB", "ENV_DB", "ENV_LOCK_TIMEOUT", "connect", "resolve_path",
           "is_current", "mart_run", "newest_run", "record_mart", "states_of",
           "clear_mart_changes", "mart_changes", "note_mart_change", "execute", "frame", "has_table", "migrate",
           "migration_files", "schema_version", "SERVING_EXCLUDE", "publish_serving", "serving_path",
           "serving_dir", "read_manifest", "collect_garbage", "note_changed", "WHOLE", "PARTITIONS",
           "table_names", "nothing_loaded", "remove_orphaned_snapshots", "TimeParseError", "parse_time"]
__all__ += ["IDLE_EPSILON"]   # the activity below which a reading counts as zero (schema.py)
__all__ += ["known_clusters", "only_cluster"]
