"""A fake ``kubectl`` for the Kubernetes tests (issue 15): an executable first on PATH that serves
the subcommands kvtui uses from a state directory, in the JSON shapes of the Kubernetes API.

State (``FakeKube.state``):
- ``pods/NAME.json``: Pod objects (``get pod NAME -o json``; ``get pods -l SELECTOR -o json`` ->
  a ``List`` of the pods whose labels match an equality selector ``a=b,c=d``);
- ``objects/KIND/NAME.json``: other objects (``get KIND NAME -o json``; ``patch KIND NAME --type
  json --patch P [--dry-run=server] -o json``: add/replace ops applied, stored unless dry-run);
- ``logs/POD/CONTAINER.log``: lines ``STAMP TEXT`` (``logs POD -c C --timestamps [--follow]
  [--since-time T] [--previous]``; ``--previous`` reads ``CONTAINER.previous.log``; a follow ends
  when ``logs/POD/CONTAINER.drop`` appears (the file is removed: a dropped stream), when
  ``CONTAINER.end`` exists, or when the container restarts (``FakeKube.restart_container``: the
  log becomes ``CONTAINER.previous.log`` and a new, later-written ``CONTAINER.log`` starts — a
  follow of the old container ends with exit 0, as kubectl's does); the current log not there yet
  is kubectl's "is waiting to start: ContainerCreating";
- ``rollouts/KIND-NAME.json`` (``FakeKube.on_rollout``): what a real patch of that object (or
  ``rollout restart``) does next — the pod replaced (its containers' command, args and env made
  from the object's pod template, as the controller does), its container's new log stamped from
  then on;
  ``rollout status`` says it completed; ``refuse-patch``: every
  patch fails with that file's text (an admission webhook); a JSON-patch ``test`` that does not
  hold fails the whole patch (``testing value … failed``);
- ``sim/`` (issue 25: the cluster's own rules, applied at every call — ``tick``): ``delete pod
  NAME [--grace-period=N] [--wait=false]`` sets ``deletionTimestamp`` = the request + the grace
  period (the pod's ``terminationGracePeriodSeconds``, 30 s by default; whole seconds) and sends
  SIGTERM: the container answers as ``FakeKube.on_sigterm`` says (prints its shutdown lines,
  exits 0: ``terminated.reason`` Completed) or is killed when the grace ends (137, Error); the pod
  stays Terminating until its containers ended (then ``finalize_after`` s) and is removed; a
  ReplicaSet makes its replacement at once (``FakeKube.on_delete``: created the request's
  second), a StatefulSet once the old pod is gone (same name, new uid); a new pod is Ready
  ``ready_after`` s after it starts. A surge rollout (``on_rollout(surge=True)``) makes the new
  pod beside the old one and deletes the old once the new is Ready; ``rollout status
  deployment/X --timeout=D`` waits with kubectl's texts (``Waiting for deployment "X" rollout to
  finish: …``, ``deployment "X" successfully rolled out``; exit 1 with ``error: timed out waiting
  for the condition``);
- ``port-forward pod/POD :PORT --address 127.0.0.1``: prints ``Forwarding from 127.0.0.1:N ->
  PORT`` and answers there as the server would (``/health_generate``, ``/v1/models``,
  ``/v1/completions``; ``FakeKube.serve``: the model, or 503), each request kept in ``forwarded``;
- ``raw/PATH`` (``FakeKube.put_raw``): what ``get --raw PATH`` prints (a service proxy's answer);
  none: the service has no endpoints;
- ``gpu.csv``: what ``exec POD -c C -- nvidia-smi --query-gpu=…`` prints (every ``-lms`` ms);
- ``calls``: one line per call (the argv, tab-separated); ``served``: the bytes ``logs`` wrote.
``logs`` follows the kubelet's rules: ``--tail=N`` the file's last N lines first, then
``--since-time`` (whole seconds: that second's lines come again), ``--timestamps`` the stamp
prefix, ``--limit-bytes=N`` the first N bytes written (stamps included; the last line cut).
Errors are kubectl's: ``Error from server (NotFound): pods "x" not found`` on stderr, exit 1.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_FAKE = r'''
import json, os, sys, time
STATE = {state!r}
argv = sys.argv[1:]
with open(os.path.join(STATE, "calls"), "a") as fh:
    fh.write("\t".join(argv) + "\n")
opts, words, i = {{}}, [], 0
VALUED = {{"--context", "--namespace", "-n", "--output", "-o", "--selector", "-l", "--container", "-c",
          "--since-time", "--type", "--patch", "-p", "--tail", "--limit-bytes"}}
rest = []
while i < len(argv):
    a = argv[i]
    if a == "--":
        rest = argv[i + 1:]; break
    if a in VALUED:
        opts[a.lstrip("-")] = argv[i + 1]; i += 2; continue
    if a.startswith("--") and "=" in a:
        k, v = a[2:].split("=", 1); opts[k] = v; i += 1; continue
    if a.startswith("-"):
        opts[a.lstrip("-")] = True; i += 1; continue
    words.append(a); i += 1
def die(msg):
    print(msg, file=sys.stderr); sys.exit(1)
def load(path, what):
    try:
        return json.load(open(path))
    except OSError:
        die(f'Error from server (NotFound): {{what}} not found')
{cluster}
verb = words[0] if words else ""
if os.path.exists(os.path.join(STATE, "unreachable")):
    # kubectl v1.32 against an API server that refuses connections: client-go's klog lines, then
    # kubectl's own error
    server = open(os.path.join(STATE, "unreachable")).read().strip() or "127.0.0.1:6443"
    stamp = time.strftime("%m%d %H:%M:%S", time.gmtime())
    for _ in range(5):
        us = time.time_ns() // 1000 % 1000000
        print(f'E{{stamp}}.{{us:06d}}   {{os.getpid()}} memcache.go:265] "Unhandled Error" '
              f'err="couldn\'t get current server API group list: Get \\"https://{{server}}/api?timeout=32s\\": dial '
              f'tcp {{server}}: connect: connection refused"', file=sys.stderr)
    die(f"The connection to the server {{server}} was refused - did you specify the right host or port?")
ns = opts.get("namespace") or opts.get("n") or "default"
if verb == "get" and opts.get("raw"):
    raw = os.path.join(STATE, "raw", words[1].strip("/").replace("/", "%"))
    if not os.path.exists(raw):
        die('Error from server (ServiceUnavailable): no endpoints available for service "' + words[1] + '"')
    sys.stdout.write(open(raw).read()); sys.exit(0)
if verb == "get":
    kind, name = words[1], (words[2] if len(words) > 2 else None)
    if kind in ("pod", "pods") and name:
        print(json.dumps(load(os.path.join(STATE, "pods", name + ".json"), f'pods "{{name}}"'))); sys.exit(0)
    if kind in ("pod", "pods"):
        sel = opts.get("selector") or opts.get("l") or ""
        want = dict(p.split("=", 1) for p in sel.split(",") if p)
        items = []
        for f in sorted(os.listdir(os.path.join(STATE, "pods"))):
            p = json.load(open(os.path.join(STATE, "pods", f)))
            labels = p["metadata"].get("labels") or {{}}
            if all(labels.get(k) == v for k, v in want.items()):
                items.append(p)
        print(json.dumps({{"apiVersion": "v1", "kind": "List", "items": items, "metadata": {{"resourceVersion": ""}}}}))
        sys.exit(0)
    obj = load(os.path.join(STATE, "objects", kind.lower(), name + ".json"), f'{{kind.lower()}} "{{name}}"')
    print(json.dumps(obj))
    sys.exit(0)
def roll_out(kind, name):
    """The controller replaces its pod: the scripted rollout (``FakeKube.on_rollout``), once."""
    hook = os.path.join(STATE, "rollouts", kind.lower() + "-" + name + ".json")
    if not os.path.exists(hook):
        return
    todo = json.load(open(hook))
    os.unlink(hook)
    pod, cont = todo["pod"]["metadata"]["name"], todo["container"]
    # the new pod is made from the (patched) template: its containers' command, args and env
    src = os.path.join(STATE, "objects", kind.lower(), name + ".json")
    spec = (json.load(open(src)).get("spec") or {{}}) if os.path.exists(src) else {{}}
    tmpl = spec.get("template") or (spec.get("leaderWorkerTemplate") or {{}}).get("leaderTemplate") or {{}}
    made = {{c["name"]: c for c in (tmpl.get("spec") or {{}}).get("containers") or []}}
    for c in todo["pod"].get("spec", {{}}).get("containers") or []:
        for fld in ("command", "args", "env"):
            c.pop(fld, None)
            if fld in made.get(c["name"], {{}}):
                c[fld] = made[c["name"]][fld]
    if todo.get("surge"):
        # a Deployment's rolling update (maxSurge 1, maxUnavailable 0): the new ReplicaSet's pod
        # now, the old pods deleted once it is Ready (``tick``)
        want = ((spec.get("selector") or {{}}).get("matchLabels")) or {{}}
        old = [f[:-5] for f in sorted(os.listdir(os.path.join(STATE, "pods")))
               if _matches(json.load(open(os.path.join(STATE, "pods", f))), want)
               and not json.load(open(os.path.join(STATE, "pods", f)))["metadata"].get("deletionTimestamp")]
        now = time.time()
        h = (todo["pod"]["metadata"].get("labels") or {{}}).get("pod-template-hash")
        for ref in todo["pod"]["metadata"].get("ownerReferences") or []:
            if ref.get("kind") == "ReplicaSet":  # the Deployment's new ReplicaSet
                rs_dir = os.path.join(STATE, "objects", "replicaset")
                os.makedirs(rs_dir, exist_ok=True)
                _jdump({{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                         "metadata": {{"name": ref["name"], "namespace": ns, "uid": ref.get("uid"),
                                      "ownerReferences": [{{"apiVersion": "apps/v1", "kind": kind, "name": name,
                                                           "controller": True}}]}},
                         "spec": {{"replicas": 1,
                                  "selector": {{"matchLabels": dict(want, **{{"pod-template-hash": h}})}}}}}},
                       os.path.join(rs_dir, ref["name"] + ".json"))
        _jdump(h, os.path.join(_simdir("revision"), kind.lower() + "-" + name + ".json"))
        make_pod({{"pod": todo["pod"], "container": cont, "log": todo["log"],
                  "ready_after": todo.get("ready_after", 0)}}, now)
        _jdump({{"new": pod, "old": [o for o in old if o != pod]}},
               os.path.join(_simdir("rollout"), f"{{kind.lower()}}-{{name}}.json"))
        tick(now)
        return
    # a new pod (a new uid) whose container starts now (the kubelet's startedAt, by the second)
    todo["pod"]["metadata"]["uid"] = "fake-%d" % time.time_ns()
    for cs in (todo["pod"].get("status") or {{}}).get("containerStatuses") or []:
        if cs.get("name") == cont and "running" in (cs.get("state") or {{}}):
            cs["state"] = {{"running": {{"startedAt": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}}}}
    json.dump(todo["pod"], open(os.path.join(STATE, "pods", pod + ".json"), "w"))
    d = os.path.join(STATE, "logs", pod)
    os.makedirs(d, exist_ok=True)
    cur = os.path.join(d, cont + ".log")
    if os.path.exists(cur):
        os.replace(cur, cur + ".replaced")  # the old pod's log goes with it: a follow of it ends
    now = time.time()
    with open(cur + ".new", "w") as fh:
        for i, text in enumerate(todo["log"]):
            t = now + 0.5 + i * 1e-4
            fh.write(time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + ".%06dZ " % int((t % 1) * 1e6) + text + "\n")
    os.replace(cur + ".new", cur)
if verb == "delete":
    kind, name = words[1], words[2]
    if kind not in ("pod", "pods"):
        die(f"fake kubectl: only pods are deleted here")
    g = opts.get("grace-period")
    if not delete_pod(name, int(g) if g is not None else None, time.time()):
        die(f'Error from server (NotFound): pods "{{name}}" not found')
    print(f'pod "{{name}}" deleted', flush=True)
    if opts.get("wait", "true") != "false":
        uid = json.load(open(_pod_path(name)))["metadata"].get("uid")
        while (_jload(_pod_path(name)) or {{}}).get("metadata", {{}}).get("uid") == uid:
            time.sleep(0.05); tick()
    sys.exit(0)
if verb == "patch":
    kind, name = words[1], words[2]
    path = os.path.join(STATE, "objects", kind.lower(), name + ".json")
    obj = load(path, f'{{kind.lower()}}.apps "{{name}}"')
    if os.path.exists(os.path.join(STATE, "refuse-patch")):
        die(open(os.path.join(STATE, "refuse-patch")).read().strip())
    for op in json.loads(opts.get("patch") or opts.get("p")):
        keys = [k.replace("~1", "/").replace("~0", "~") for k in op["path"].split("/")[1:]]
        node = obj
        for k in keys[:-1]:
            node = node[int(k)] if isinstance(node, list) else node[k]
        last = keys[-1]
        if op["op"] == "test":
            have = node[int(last)] if isinstance(node, list) else node.get(last)
            if have != op["value"]:
                die(f'Error from server: testing value {{op["path"]}} failed: test failed')
        elif op["op"] in ("add", "replace"):
            if isinstance(node, list):
                node[int(last)] = op["value"]
            else:
                node[last] = op["value"]
        else:
            die(f"error: unsupported patch op {{op['op']}}")
    if opts.get("dry-run") != "server":
        json.dump(obj, open(path, "w"))
        roll_out(kind, name)
    print(json.dumps(obj)); sys.exit(0)
if verb == "rollout":
    what, target = words[1], words[2]
    kind, _, name = target.partition("/")
    if what == "restart":
        roll_out(kind, name)
        print(f"{{target}} restarted"); sys.exit(0)
    if what == "status" and kind.lower() == "deployment":
        limit = _duration(opts.get("timeout"))
        deadline, said = time.time() + limit, None
        while True:
            tick()
            msg, done = deployment_status(name)
            if msg != said:
                print(msg, flush=True); said = msg
            if done:
                sys.exit(0)
            if limit and time.time() >= deadline:
                die("error: timed out waiting for the condition")
            time.sleep(0.05)
    if what == "status":
        print(f"{{kind}} rolling update complete 1 pods at revision {{name}}-7d9f8c6b5"); sys.exit(0)
if verb == "logs":
    pod = words[1]
    cont = opts.get("container") or opts.get("c") or "main"
    d = os.path.join(STATE, "logs", pod)
    path = os.path.join(d, cont + (".previous.log" if opts.get("previous") else ".log"))
    if not os.path.exists(path):
        if opts.get("previous"):
            die(f'Error from server (BadRequest): previous terminated container "{{cont}}" in pod "{{pod}}" not found')
        if os.path.exists(os.path.join(STATE, "pods", pod + ".json")):
            die(f'Error from server (BadRequest): container "{{cont}}" in pod "{{pod}}" is waiting to start: '
                'ContainerCreating')
        die(f'Error from server (NotFound): pods "{{pod}}" not found')
    # the kubelet's ReadLogs (pkg/kubelet/kuberuntime/logs): --tail seeks to the start of the
    # file's last N lines first; then each line older than --since-time is skipped (the API's
    # sinceTime is whole seconds: lines of that second come again); --timestamps prefixes the
    # stamp; --limit-bytes caps the bytes written (stamps included), cutting the last line
    since = opts.get("since-time")
    since_s = since[:19] if since else None
    tail = int(opts.get("tail", -1))
    remain = int(opts.get("limit-bytes", 0) or 0) or None
    follow, stamps = bool(opts.get("follow")), bool(opts.get("timestamps"))
    out = sys.stdout.buffer
    pend = bytearray()
    def flush():
        if pend:
            n = len(pend)
            out.write(bytes(pend)); out.flush()
            pend.clear()
            with open(os.path.join(STATE, "served"), "a") as fh_served:
                fh_served.write("%d\n" % n)
    def emit(raw):
        """One line (with its newline, if it had one); False once --limit-bytes is spent."""
        global remain
        stamp, _, text = raw.partition(b" ")
        if since_s and stamp[:19].decode() < since_s:
            return True
        line = raw if stamps else text
        if remain is not None:
            line = line[:remain]
            remain -= len(line)
        pend.extend(line)
        if len(pend) >= 1 << 16:
            flush()
        return remain is None or remain > 0
    def tail_start(fh, n):
        end = fh.seek(0, 2)
        if n < 0:
            return 0
        fh.seek(max(0, end - 1)); last = fh.read(1)
        need = n + (1 if last == b"\n" else 0)  # a final newline ends the last line
        if need == 0:
            return end
        pos, seen = end, 0
        while pos > 0:
            step = min(1 << 16, pos); pos -= step
            fh.seek(pos); block = fh.read(step)
            k = len(block)
            while True:
                k = block.rfind(b"\n", 0, k)
                if k < 0:
                    break
                seen += 1
                if seen == need:
                    return pos + k + 1
        return 0
    fh = open(path, "rb")  # this container's log: a restart rotates the file, the stream ends
    fh.seek(tail_start(fh, tail))
    carry = b""
    ticks = 0
    while True:
        while True:
            block = fh.read(1 << 20)
            if not block:
                break
            lines = (carry + block).split(b"\n")
            carry = lines.pop()
            for raw in lines:
                if not emit(raw + b"\n"):
                    flush(); sys.exit(0)
        if not follow:
            if carry:
                emit(carry)
            flush(); sys.exit(0)
        flush()
        if os.path.exists(os.path.join(d, cont + ".end")):
            sys.exit(0)
        try:
            rotated = os.stat(path).st_ino != os.fstat(fh.fileno()).st_ino
        except FileNotFoundError:
            rotated = True
        if rotated:
            rest = fh.read()
            if not rest:
                sys.exit(0)  # the container ended (it restarted): kubectl logs -f ends with it
            fh.seek(-len(rest), 1)
            continue
        drop = os.path.join(d, cont + ".drop")
        if os.path.exists(drop):
            os.unlink(drop)
            print("error: unexpected EOF", file=sys.stderr); sys.exit(1)
        time.sleep(0.02)
        ticks += 1
        if ticks % 5 == 0:
            tick()
if verb == "port-forward":
    # a local port to the pod's: answered here as the server in the pod would (``sim/serve/POD.json``:
    # {{"model": …}} or {{"down": true}}; none: it serves the model "default")
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    pod = words[1].split("/", 1)[-1]
    remote = words[2].rsplit(":", 1)[-1]
    p = _jload(_pod_path(pod))
    if p is None:
        die(f'Error from server (NotFound): pods "{{pod}}" not found')
    if (p.get("status") or {{}}).get("phase") != "Running":
        die(f"error: unable to forward port because pod is not running. Current status={{p['status'].get('phase')}}")
    class Server(BaseHTTPRequestHandler):
        def _answer(self):
            serve = _jload(os.path.join(SIM, "serve", pod + ".json"), {{"model": "default"}})
            with open(os.path.join(STATE, "forwarded"), "a") as fh:
                fh.write(f"{{pod}} {{remote}} {{self.command}} {{self.path}}\n")
            if serve.get("down"):
                code, body = 503, {{"error": "the server is not up"}}
            elif self.path == "/v1/models":
                model = serve.get("model", "default")
                code, body = 200, {{"object": "list", "data": [{{"id": model, "object": "model"}}]}}
            elif self.path == "/v1/completions":
                code, body = 200, {{"object": "text_completion", "choices": [{{"index": 0, "text": "!"}}]}}
            elif self.path in ("/health_generate", "/health"):
                code, body = 200, {{}}
            else:
                code, body = 404, {{"detail": "Not Found"}}
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        def do_GET(self):
            self._answer()
        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self._answer()
        def log_message(self, *args):
            pass
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Server)
    print(f"Forwarding from 127.0.0.1:{{srv.server_address[1]}} -> {{remote}}", flush=True)
    srv.serve_forever()
if verb == "exec":
    if rest[:1] != ["nvidia-smi"]:
        die("fake kubectl: only nvidia-smi can be exec'd")
    query = next((a for a in rest if a.startswith("--query-gpu=")), "")
    if os.path.exists(os.path.join(STATE, "old-driver")) and "power.limit" in query:
        print('Field "power.limit" is not a valid field to query.'); sys.exit(2)
    interval = None
    if "-lms" in rest:
        interval = int(rest[rest.index("-lms") + 1]) / 1000
    while True:
        sys.stdout.write(open(os.path.join(STATE, "gpu.csv")).read()); sys.stdout.flush()
        if interval is None:
            sys.exit(0)
        time.sleep(interval)
die(f'error: unknown command "{{verb}}" for "kubectl"')
'''

_CLUSTER = r'''
# -- the simulated cluster (issue 25): deletion grace, controllers, readiness, surge rollouts ----
import fcntl
SIM = os.path.join(STATE, "sim")
DEFAULT_GRACE = 30
def _stamp_s(t):
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))
def _stamp_ns(t):
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + ".%06dZ" % int((t % 1) * 1e6)
def _simdir(kind):
    d = os.path.join(SIM, kind)
    os.makedirs(d, exist_ok=True)
    return d
def _jload(p, default=None):
    try:
        with open(p) as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return default
def _jdump(obj, p):
    tmp = p + ".tmp%d" % os.getpid()
    with open(tmp, "w") as fh:
        json.dump(obj, fh)
    os.replace(tmp, p)
def _pod_path(name):
    return os.path.join(STATE, "pods", name + ".json")
def _owner_kind(pod):
    for r in (pod.get("metadata") or {}).get("ownerReferences") or []:
        if r.get("controller"):
            return r.get("kind")
    return None
def _set_ready(pod, ready):
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        if "running" in (cs.get("state") or {}):
            cs["ready"] = ready
    conds = [c for c in (pod.setdefault("status", {}).get("conditions") or []) if c.get("type") != "Ready"]
    conds.append({"type": "Ready", "status": "True" if ready else "False"})
    pod["status"]["conditions"] = conds
def make_pod(spec, now):
    """The controller makes a pod (``spec``: pod, container, log, ready_after): a new uid, created
    now (the API server's creationTimestamp: whole seconds), its containers started now, Ready
    once its readiness probe passes (``ready_after`` s later)."""
    pod = spec["pod"]
    meta = pod["metadata"]
    name, cont = meta["name"], spec["container"]
    meta["uid"] = "fake-%d" % time.time_ns()
    meta["creationTimestamp"] = _stamp_s(now)
    meta.pop("deletionTimestamp", None)
    meta.pop("deletionGracePeriodSeconds", None)
    st = pod.setdefault("status", {})
    st["phase"] = "Running"
    for cs in st.get("containerStatuses") or []:
        cs["state"] = {"running": {"startedAt": _stamp_s(now)}}
        cs["restartCount"] = 0
        cs["lastState"] = {}
    after = float(spec.get("ready_after") or 0)
    _set_ready(pod, after <= 0)
    d = os.path.join(STATE, "logs", name)
    os.makedirs(d, exist_ok=True)
    cur = os.path.join(d, cont + ".log")
    with open(cur + ".new", "w") as fh:
        for i, text in enumerate(spec.get("log") or []):
            fh.write(_stamp_ns(now + 0.01 + i * 1e-4) + " " + text + "\n")
    os.replace(cur + ".new", cur)
    _jdump(pod, _pod_path(name))
    if after > 0:
        _jdump({"at": now + after, "uid": meta["uid"]}, os.path.join(_simdir("ready"), name + ".json"))
def delete_pod(name, grace, now):
    """``kubectl delete pod``: deletionTimestamp = now + grace (the pod's
    terminationGracePeriodSeconds, 30 s by default); the container gets SIGTERM (``sim/sigterm``
    says how it answers); a ReplicaSet makes the replacement at once, a StatefulSet once the old
    pod is gone (``sim/replace``)."""
    pod = _jload(_pod_path(name))
    if pod is None:
        return False
    meta = pod["metadata"]
    if meta.get("deletionTimestamp"):
        return True
    if grace is None or grace < 0:
        grace = (pod.get("spec") or {}).get("terminationGracePeriodSeconds")
        grace = DEFAULT_GRACE if grace is None else int(grace)
    meta["deletionTimestamp"] = _stamp_s(now + grace)
    meta["deletionGracePeriodSeconds"] = grace
    _jdump(pod, _pod_path(name))
    _jdump({"requested": now, "grace": grace, "uid": meta.get("uid"), "exited": None},
           os.path.join(_simdir("terminating"), name + ".json"))
    rep = os.path.join(_simdir("replace"), name + ".json")
    spec = _jload(rep)
    if spec is not None and _owner_kind(pod) != "StatefulSet":
        os.unlink(rep)
        make_pod(spec, now + 0.001)
    return True
FINALIZE_S = 0.5  # a pod whose containers all ended is removed this long after (the kubelet's sync)
def tick(now=None):
    """What the cluster did since the last call: readiness probes that passed, terminating pods
    whose container exited (SIGTERM answered) or whose grace ran out (SIGKILL: 137), pods removed,
    a StatefulSet's pod made again, a surge rollout's old pod deleted once the new one is Ready."""
    if not os.path.isdir(SIM):
        return
    now = time.time() if now is None else now
    with open(os.path.join(SIM, ".lock"), "a") as lk:
        fcntl.flock(lk, fcntl.LOCK_EX)
        fin = _jload(os.path.join(SIM, "finalize_s"), FINALIZE_S)
        for f in sorted(os.listdir(_simdir("ready"))):
            r = _jload(os.path.join(SIM, "ready", f))
            name = f[:-5]
            pod = _jload(_pod_path(name))
            if r is None or pod is None or pod["metadata"].get("uid") != r["uid"]:
                os.unlink(os.path.join(SIM, "ready", f)); continue
            if now >= r["at"]:
                if not pod["metadata"].get("deletionTimestamp"):
                    _set_ready(pod, True)
                    _jdump(pod, _pod_path(name))
                os.unlink(os.path.join(SIM, "ready", f))
        for f in sorted(os.listdir(_simdir("terminating"))):
            tp = os.path.join(SIM, "terminating", f)
            t = _jload(tp)
            name = f[:-5]
            pod = _jload(_pod_path(name))
            if t is None or pod is None or pod["metadata"].get("uid") != t["uid"]:
                os.unlink(tp); continue
            if t["exited"] is None:
                sig = _jload(os.path.join(SIM, "sigterm", f))
                code, lines = None, []
                if sig is not None and sig.get("after", 0) < t["grace"] and now >= t["requested"] + sig.get("after", 0):
                    code, lines = int(sig.get("exitCode", 0)), sig.get("lines") or []
                    ended = t["requested"] + sig.get("after", 0)
                elif now >= t["requested"] + t["grace"]:
                    code, ended = 137, t["requested"] + t["grace"]  # SIGKILL at the end of the grace period
                if code is None:
                    continue
                for cs in (pod.get("status") or {}).get("containerStatuses") or []:
                    run = (cs.get("state") or {}).get("running") or {}
                    mine = cs.get("name") == (sig or {}).get("container", cs.get("name"))
                    c = code if mine else 137 if code == 137 else 0
                    cs["state"] = {"terminated": {"exitCode": c, "reason": "Completed" if c == 0 else "Error",
                                                  "startedAt": run.get("startedAt"), "finishedAt": _stamp_s(ended)}}
                    cs["ready"] = False
                    d = os.path.join(STATE, "logs", name)
                    if mine and lines and os.path.isdir(d):
                        with open(os.path.join(d, cs["name"] + ".log"), "a") as fh:
                            for i, text in enumerate(lines):
                                fh.write(_stamp_ns(t["requested"] + 0.001 + i * 1e-4) + " " + text + "\n")
                    if os.path.isdir(d):
                        open(os.path.join(d, cs["name"] + ".end"), "w").close()
                _set_ready(pod, False)
                pod["status"]["phase"] = "Succeeded" if code == 0 else "Failed"
                _jdump(pod, _pod_path(name))
                t["exited"] = now
                _jdump(t, tp)
            elif now >= t["exited"] + fin:
                os.unlink(_pod_path(name))
                d = os.path.join(STATE, "logs", name)
                if os.path.isdir(d):
                    os.replace(d, os.path.join(STATE, "logs", ".gone-" + str(t["uid"])))
                os.unlink(tp)
                rep = os.path.join(SIM, "replace", f)
                spec = _jload(rep)
                if spec is not None:
                    os.unlink(rep)
                    make_pod(spec, now)
        for f in sorted(os.listdir(_simdir("rollout"))):
            rp = os.path.join(SIM, "rollout", f)
            ro = _jload(rp)
            new = _jload(_pod_path(ro["new"])) if ro else None
            if ro is None or new is None:
                continue
            conds = new["status"].get("conditions") or []
            if any(c.get("type") == "Ready" and c.get("status") == "True" for c in conds):
                for old in ro["old"]:
                    delete_pod(old, None, now)  # maxSurge 1, maxUnavailable 0: the old pod goes once the new is Ready
                os.unlink(rp)
def _matches(pod, want):
    labels = pod["metadata"].get("labels") or {}
    return all(labels.get(k) == v for k, v in want.items())
def deployment_status(name):
    """(message, done) as ``kubectl rollout status deployment/NAME`` says it (kubectl's
    DeploymentStatusViewer): counts over the pods the Deployment's selector picks."""
    obj = _jload(os.path.join(STATE, "objects", "deployment", name + ".json"))
    if obj is None:
        die(f'Error from server (NotFound): deployments.apps "{name}" not found')
    spec = obj.get("spec") or {}
    want = ((spec.get("selector") or {}).get("matchLabels")) or {}
    replicas = int(spec.get("replicas", 1))
    rev = _jload(os.path.join(SIM, "revision", "deployment-" + name + ".json"))
    pods = [_jload(os.path.join(STATE, "pods", f)) for f in sorted(os.listdir(os.path.join(STATE, "pods")))]
    live = [p for p in pods if p and _matches(p, want) and not p["metadata"].get("deletionTimestamp")]
    upd = [p for p in live if rev is None or (p["metadata"].get("labels") or {}).get("pod-template-hash") == rev]
    avail = [p for p in upd if any(c.get("type") == "Ready" and c.get("status") == "True"
                                   for c in (p.get("status") or {}).get("conditions") or [])]
    if len(upd) < replicas:
        return (f'Waiting for deployment "{name}" rollout to finish: {len(upd)} out of {replicas} new replicas '
                "have been updated...", False)
    if len(live) > len(upd):
        return (f'Waiting for deployment "{name}" rollout to finish: {len(live) - len(upd)} old replicas are '
                "pending termination...", False)
    if len(avail) < len(upd):
        return (f'Waiting for deployment "{name}" rollout to finish: {len(avail)} of {len(upd)} updated replicas '
                "are available...", False)
    return f'deployment "{name}" successfully rolled out', True
def _duration(text):
    if not text:
        return 0.0
    mult = {"s": 1, "m": 60, "h": 3600}
    total, num = 0.0, ""
    for ch in text:
        if ch.isdigit() or ch == ".":
            num += ch
        else:
            total += float(num or 0) * mult.get(ch, 1); num = ""
    return total + (float(num) if num else 0.0)
tick()
'''


@dataclass
class FakeKube:
    """The fake kubectl in ``bin_dir`` (put it first on PATH) and its state."""

    bin_dir: Path
    state: Path

    @classmethod
    def create(cls, root: Path) -> FakeKube:
        bin_dir, state = root / "bin", root / "state"
        for d in (bin_dir, state / "pods", state / "objects", state / "logs"):
            d.mkdir(parents=True, exist_ok=True)
        exe = bin_dir / "kubectl"
        exe.write_text(f"#!{sys.executable}\n" + _FAKE.format(state=str(state), cluster=_CLUSTER))
        exe.chmod(0o755)
        (state / "calls").touch()
        return cls(bin_dir, state)

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["PATH"] = f"{self.bin_dir}{os.pathsep}{env.get('PATH', '')}"
        return env

    def put_pod(self, obj: dict[str, object], name: str | None = None) -> None:
        meta = obj["metadata"]
        assert isinstance(meta, dict)
        (self.state / "pods" / f"{name or meta['name']}.json").write_text(json.dumps(obj))

    def put_object(self, obj: dict[str, object]) -> Path:
        meta = obj["metadata"]
        assert isinstance(meta, dict)
        d = self.state / "objects" / str(obj["kind"]).lower()
        d.mkdir(exist_ok=True)
        path = d / f"{meta['name']}.json"
        path.write_text(json.dumps(obj))
        return path

    def log_path(self, pod: str, container: str, previous: bool = False) -> Path:
        d = self.state / "logs" / pod
        d.mkdir(parents=True, exist_ok=True)
        return d / (container + (".previous.log" if previous else ".log"))

    def append_log(self, pod: str, container: str, lines: list[str], previous: bool = False) -> None:
        with self.log_path(pod, container, previous).open("a") as fh:
            fh.writelines(line + "\n" for line in lines)

    def restart_container(self, pod: str, container: str, new_lines: list[str] | None = None) -> None:
        """The container ended and a new one runs: its log becomes the previous container's (a
        follow of it ends), the new container's log holds ``new_lines`` (None: not written yet —
        the new container has printed nothing, or is still being created)."""
        cur = self.log_path(pod, container)
        if cur.exists():
            cur.replace(self.log_path(pod, container, previous=True))
        if new_lines is not None:
            tmp = cur.with_suffix(".new")
            tmp.write_text("".join(line + "\n" for line in new_lines))
            tmp.replace(cur)

    def on_rollout(self, kind: str, name: str, pod: dict[str, object], container: str, log: list[str], *,
                   surge: bool = False, ready_after: float = 0.0) -> None:
        """What the controller does at the next patch (or ``rollout restart``) of ``kind/name``: the
        pod is replaced by ``pod`` whose container prints ``log`` (stamped from then on).
        ``surge`` (a Deployment's rolling update, maxSurge 1 / maxUnavailable 0): ``pod`` (another
        name, the new ``pod-template-hash``) is made beside the old pods, Ready ``ready_after`` s
        later; then the old pods are deleted (grace, SIGTERM: ``on_sigterm``)."""
        d = self.state / "rollouts"
        d.mkdir(exist_ok=True)
        (d / f"{kind.lower()}-{name}.json").write_text(json.dumps(
            {"pod": pod, "container": container, "log": log, "surge": surge, "ready_after": ready_after}))

    def _sim(self, kind: str) -> Path:
        d = self.state / "sim" / kind
        d.mkdir(parents=True, exist_ok=True)
        return d

    def on_delete(self, gone: str, pod: dict[str, object], container: str, log: list[str],
                  ready_after: float = 0.0) -> None:
        """The pod the controller makes when pod ``gone`` is deleted: a ReplicaSet's at once (its
        creationTimestamp the deletion request's second), a StatefulSet's once ``gone`` is removed."""
        (self._sim("replace") / f"{gone}.json").write_text(json.dumps(
            {"pod": pod, "container": container, "log": log, "ready_after": ready_after}))

    def on_sigterm(self, pod: str, container: str, lines: list[str], *, after: float = 0.2, exit_code: int = 0) -> None:
        """How ``pod``'s server answers SIGTERM: it prints ``lines`` and exits ``exit_code``
        ``after`` s later (none of this: it is killed when the grace period ends, 137)."""
        (self._sim("sigterm") / f"{pod}.json").write_text(json.dumps(
            {"container": container, "lines": lines, "after": after, "exitCode": exit_code}))

    def serve(self, pod: str, model: str | None = "default") -> None:
        """How the server in ``pod`` answers through ``kubectl port-forward`` (None: 503, not up)."""
        (self._sim("serve") / f"{pod}.json").write_text(json.dumps({"down": True} if model is None else
                                                                   {"model": model}))

    def forwarded(self) -> list[str]:
        """The requests the port-forwards carried: ``POD PORT METHOD PATH``."""
        path = self.state / "forwarded"
        return path.read_text().splitlines() if path.exists() else []

    def ready_now(self, pod: str) -> None:
        """``pod``'s readiness probe passes now (its ``ready_after`` cut short): the cluster marks it
        Ready at its next call. A test releases a rollout at the moment it chooses."""
        import fcntl

        path = self._sim("ready") / f"{pod}.json"
        with open(self.state / "sim" / ".lock", "a") as lk:
            fcntl.flock(lk, fcntl.LOCK_EX)
            doc = json.loads(path.read_text())
            doc["at"] = 0
            path.with_suffix(".new").write_text(json.dumps(doc))
            path.with_suffix(".new").replace(path)

    def finalize_after(self, seconds: float) -> None:
        """How long a pod whose containers ended stays (Terminating) before it is removed."""
        self._sim("ready")
        (self.state / "sim" / "finalize_s").write_text(json.dumps(seconds))

    def kubectl(self, *argv: str, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
        """Run the fake kubectl as an operator would (``kubectl delete pod …``)."""
        return subprocess.run(["kubectl", "--namespace", "llm", *argv], capture_output=True, text=True,
                              env=self.env(), timeout=timeout, check=False)

    def pod(self, name: str) -> dict[str, Any] | None:
        path = self.state / "pods" / f"{name}.json"
        try:
            out: dict[str, Any] = json.loads(path.read_text())
        except (OSError, ValueError):
            return None
        return out

    def put_raw(self, path: str, text: str | None) -> None:
        """What ``kubectl get --raw PATH`` answers (None: the service has no endpoints)."""
        d = self.state / "raw"
        d.mkdir(exist_ok=True)
        f = d / path.strip("/").replace("/", "%")
        if text is None:
            f.unlink(missing_ok=True)
        else:
            f.write_text(text)

    def drop(self, pod: str, container: str) -> None:
        (self.state / "logs" / pod / f"{container}.drop").touch()

    def end(self, pod: str, container: str) -> None:
        (self.state / "logs" / pod / f"{container}.end").touch()

    def served(self) -> int:
        """Every byte ``kubectl logs`` has written to its callers so far (counted as each 64 KiB is
        written: a run killed mid-way counts what it wrote)."""
        path = self.state / "served"
        return sum(int(x) for x in path.read_text().split()) if path.exists() else 0

    def calls(self) -> list[list[str]]:
        return [line.split("\t") for line in (self.state / "calls").read_text().splitlines()]


async def until(cond: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    """Wait (bounded) until ``cond()`` holds: the kube tests' poll."""
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)

