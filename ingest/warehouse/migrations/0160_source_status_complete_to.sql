-- How complete each collected source is (models/service/loop.py): the time up to which its data is in the
-- warehouse, its watermark after the last successful collection (sacct: the end of the last read that slurmctld
-- had handed every record to slurmdbd for; prometheus: the end of the last window). A source can succeed every
-- cycle and still fall behind here (sdiag's queue not draining): the Data health page and /metrics show it.
-- NULL for sources without a watermark (snapshots: nodes, squeue, reservations; events, governance).
ALTER TABLE source_status ADD COLUMN complete_to TIMESTAMP;
