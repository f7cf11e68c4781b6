"""Reusable test kits for odsd (deterministic data, reference models, process helpers).

Shipped in the package, like ``zarr.testing``, so that downstream code can test its own
integrations against the same generators and models that odsd's test suite uses.
"""
