"""I/O layer: reaching hosts (SSH, this machine, Kubernetes, a recorded bundle). Not part of the pure core.

The simulated demo host is not here: it is ``kvtui.sim`` (``kvtui.sim.backend.DemoBackend``), which
``factory.make_backend`` names beside these backends. The views import only the public modules
``backend`` (the protocol), ``factory``, ``service`` (the package), ``probe`` and ``orphans``
(an import-linter contract in pyproject.toml)."""
