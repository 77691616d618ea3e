"""Kubernetes pods as hosts (issue 15).

- ``commands``: every ``kubectl`` argv kvtui runs (an exact-argv test each), ``kubectl`` as the
  user has it (their kubeconfig, contexts, auth plugins), never a credential of kvtui's own;
- ``state``: pure readers of the Kubernetes API's JSON (a pod's state in words, the pods of a
  StatefulSet / LeaderWorkerSet in rank order, the controller and whether Helm / Argo CD / Flux
  manage it, the container's args as editable text and as a JSON patch) and ``LogResume``
  (``kubectl logs -f --timestamps`` resumed with ``--since-time`` after a drop, without a repeat);
- ``dcgm``: a DCGM exporter's Prometheus text as GPU samples (pure);
- ``backend``: ``KubeBackend`` (the log with restarts read as boots, GPU memory via ``exec
  nvidia-smi`` or the exporter, the pod's state in the connection status);
- ``ops``: ``KubeOps``, the guarded service's view: the controller's args patched after a
  server-side dry run, backed up, rolled out and followed; GitOps-managed objects refused unless
  forced.
"""
