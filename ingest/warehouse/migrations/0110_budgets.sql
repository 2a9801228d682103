-- 0110: budgets from the governance file's [[budgets]] (issue 19). Every column: docs/SCHEMA.md ("Budgets and alerts").
-- Replaced as a whole by every governance load; not part of the canonical document statements freeze.
CREATE TABLE budgets (
    budget_no   INTEGER NOT NULL,             -- position in the file's [[budgets]] (0-based)
    scope       VARCHAR NOT NULL,             -- team | cost_center
    name        VARCHAR NOT NULL,             -- the team or the cost centre
    period      VARCHAR NOT NULL,             -- month | quarter (calendar, in the governance period_timezone)
    unit        VARCHAR NOT NULL,             -- money (the governance currency) | gpu_hours
    amount      DECIMAL(18, 4) NOT NULL,      -- the budget per period, in unit
    valid_from  TIMESTAMP,                    -- first day of the first period it applies to (NULL: always)
    valid_to    TIMESTAMP                     -- periods starting on or after this are not covered (NULL: open)
);
