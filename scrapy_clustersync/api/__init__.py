"""``clustersync serve``: the cluster over HTTP. A REST API (FastAPI, its OpenAPI document at
``/api/openapi.json``), a dashboard at ``/`` and Prometheus metrics at ``/metrics``
(docs/api.md).

Stateless: every request reads and writes the Redis state the ``clustersync`` command reads
and writes, through the same functions (store/ and cli/), so the two never disagree. Needs the
``api`` extra (fastapi, uvicorn, prometheus-client).
"""
