-- Scheduled reports (issue 19 part 4; models/service/reports.py): one row per delivery attempt of a configured
-- [[reports]] entry to one recipient for one period, so a report is sent once per period even across restarts
-- (a (report, period, recipient) with a 'sent' or 'refused' row is never sent again) and finance can see who
-- was sent what, when. Append-only; written only by the service (`gpuledger serve`).
CREATE TABLE IF NOT EXISTS report_runs (
    report     VARCHAR NOT NULL,    -- the [[reports]] entry's name
    kind       VARCHAR NOT NULL,    -- weekly, team_note, finance
    period     VARCHAR NOT NULL,    -- ISO week '2026-W42' (weekly, team_note) or month '2026-09' (finance)
    recipient  VARCHAR NOT NULL,    -- an email address
    status     VARCHAR NOT NULL,    -- sent, failed (retried later), refused (the recipient's role may not see it)
    attempts   INTEGER NOT NULL,    -- SMTP attempts inside this run (delivery retries with backoff)
    error      VARCHAR,             -- one line; NULL when sent
    subject    VARCHAR,
    ended_at   TIMESTAMP NOT NULL   -- UTC, when the attempt ended
);
