"""The analytics, in layers that import only downward (checked by tests/test_layers.py; docs/ARCHITECTURE.md):

- ``definitions``: each idea once (time windows and buckets, labels and size classes, job and node SQL, policy)
- ``kernels``: pure computation a mart and its reader share (interval sums, the free-GPU grid, attribution)
- ``marts``: builders, the only writers besides ingest and period close
- ``metrics``: readers (utilization, fragmentation, blocked waits, queue, fairness, cost, chargeback, efficiency,
  demand, freshness); they never write and never build
- ``forecasting`` and ``simulation``: planners' models over the metrics
- ``pipeline``: `gpuledger refresh` (marts in order, open statements, publish) and period close
- ``demo``: the calibrated synthetic cluster, ingested through the real ingestors and refreshed

Storage (the warehouse file, schema, transactions, mart state, serving snapshot) is ``ingest.warehouse``.
"""
