"""The collector service (`gpuledger serve --config gpuledger.toml`): ``config`` (the TOML), ``sources`` (the
registered source kinds, each a call of an existing ingestor), ``loop`` (cycles, backoff, source_status, signals),
``health`` (/healthz and /metrics). Beside the dashboards in the layers: it runs ingest and the pipeline; the CLI
composes it with dashboards.server."""
