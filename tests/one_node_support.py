"""Issue 23's host-and-one-node-deployment inventory, shared by the tests that run one scenario on
both: a demo host ``solo``, and ``dep1``, a ``[deployments.NAME]`` of one demo node ``one``."""

from __future__ import annotations

HOSTS = """
[hosts.solo]
demo = true
demo_speed = 400.0

[hosts.one]
demo = true
demo_speed = 400.0

[deployments.dep1]
nodes = ["one"]
"""
