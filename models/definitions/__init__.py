"""Shared definitions: each idea once (time windows and buckets, dimensions and labels, size classes, job and
node SQL fragments, the governance policy). They import only storage; every layer above uses them."""
