"""Kubernetes pods as hosts (issue 15, part 2): the seams laid so far.

- ``commands``: every ``kubectl`` argv kvtui runs (an exact-argv test each), ``kubectl`` as the
  user has it (their kubeconfig, contexts, auth plugins), never a credential of kvtui's own;
- ``state``: pure readers of the Kubernetes API's JSON (a pod's state in words, the pods of a
  StatefulSet / LeaderWorkerSet in rank order, the controller and whether Helm / Argo CD / Flux
  manage it, the container's args and their JSON-patch path) and ``LogResume`` (``kubectl logs -f
  --timestamps`` resumed with ``--since-time`` after a drop, without repeating a line).

Not yet (next): a ``KubeBackend`` (``HostBackend``: follow_log over ``logs -f`` with LogResume and
restarts through ``--previous``; GPU samples over ``exec … nvidia-smi -lms``; ``service_ops`` that
patches the controller's args after a server-side dry-run, refusing GitOps-managed objects without
``--force``), the ``kube`` host kind in ``kvtui.config`` and ``kvtui.hosts.factory``.
"""
