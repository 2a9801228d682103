-- Who may see what on the dashboard (issue 15): the governance file's [[access]] entries and whom to ask for
-- access (dashboards/access.py reads them; ingest/governance.py writes them with the rest of the governance).
CREATE TABLE access_roles (
    user_name VARCHAR PRIMARY KEY,      -- as the proxy's identity header gives it, lower case
    role      VARCHAR NOT NULL,         -- admin | manager | finance | team_lead | member
    teams     VARCHAR[] NOT NULL        -- the teams a team_lead or member sees; empty for the other roles
);
CREATE TABLE access_settings (
    contact VARCHAR                     -- whom an unknown user is told to ask (access_contact)
);
