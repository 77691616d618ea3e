"""The fleet (issue 26): every serving instance and its GPUs, read from the Prometheus that already
scrapes them (``[prometheus]`` in hosts.toml), not over one SSH connection per host.

- ``client``: Prometheus's HTTP API (``/api/v1/query``, ``/api/v1/query_range``) over urllib, with
  the errors an operator can act on (``PromError``);
- ``rows``: the PromQL (one query per column, never one per host), the join of engine instances
  to DCGM GPUs by host, and the typed ``FleetRow`` with its trouble reasons.

Core: no textual, asyncssh, host or view imports (the console runs ``fetch_fleet`` in a thread).
"""
