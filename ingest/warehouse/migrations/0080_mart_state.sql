-- One freshness rule for every mart (ingest/warehouse/mart_state.py): the table the efficiency and demand marts
-- used alone now serves all of them.
ALTER TABLE gpu_mart_state RENAME TO mart_state;
