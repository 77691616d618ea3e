"""``KubeBackend``: a server in a Kubernetes pod, followed with the operator's own ``kubectl``.

- **Log**: ``kubectl logs --follow --timestamps`` (argv from ``kvtui.hosts.kube.kubectl_argv``); each
  line's kubelet stamp is its ``ts`` and its cursor. A stream that drops is resumed with
  ``--since-time`` at the last stamp, and ``LogResume`` drops the lines the kubelet sends again
  (0 lost, 0 repeated). When the container restarted (its ``restartCount`` went up: a crash, an
  OOM kill, CrashLoopBackOff), the crashed container's last lines come from ``--previous``, then
  a record of kvtui's own says how it ended (``kvtui.liveness``: "the server process exited
  (container sglang: OOMKilled …)"), so every reader sees a failed boot; the new container's
  lines start the next boot. CrashLoopBackOff is a history of failed boots, not a blank screen.
  The pod is read again before every new stream (after a drop, a back-off, an ended container),
  so a restart is handled before the new container's first line whenever it happened; a new
  container that has printed nothing yet ("waiting to start") is followed again until it has.
  ``NEXT_BOOT`` takes only lines stamped after now.
- **A container up for days** (``CURRENT_BOOT``, ``_catch_up``): not read whole — its log's head
  (the boot's start) through the ready line and a margin, one gap record (``since``/``until``),
  the tail followed on; ``search_log`` searches a gap (``--since-time`` filtered here: kubectl has
  no server-side grep, so a search costs the gap's bytes).
- **A pod made again** (a host named by its pod: the pod deleted — a drained node, an eviction,
  ``kubectl delete pod`` — and its controller made another): the pod that took its place is
  found by the controller's labels (``state.successor``: a Deployment's has another name, a
  StatefulSet's the same name and another uid); the old pod's boot ends with a record of kvtui's
  own and the new pod's whole log is the next boot. Until it exists the status says so.
- **The next boot** (a restart, an apply's rollout: ``follow_next_boot``, a
  ``PositionedLogSource``) is the next *container*: the one after the container running when
  the restart was marked (``mark_next_boot``) or the follow began — another pod (uid; a
  Deployment's new pod is found by its controller's labels), or the same pod's container
  restarted — followed from its own ``startedAt``. The old pod's lines never count, however late
  it prints (a rolling update keeps it serving; a terminating pod prints its shutdown), and the
  follow is positioned at once: no settle time.
- **GPUs**: ``kubectl exec … -- nvidia-smi --query-gpu=… -lms N`` in the server's container; a
  stream that ends is restarted, the last samples marked stale meanwhile. With
  ``gpu_metrics_url`` (a DCGM exporter's in-cluster URL) its Prometheus text instead, read through
  the API server's service proxy (``kvtui.hosts.kube.dcgm``).
- **Pod state**: ``pod_state()`` (``kvtui.hosts.kube.state.PodState``): Pending and why, waiting
  reasons, readiness, restarts, the last termination (OOMKilled is host memory, not GPU).
- **The probe** (``open_port``: ``PortOpener``): ``kubectl port-forward pod/POD :PORT --address
  127.0.0.1`` to the pod followed now; kvtui's one-token request goes through it.
- **The controller** (``learn_controller``): a host named by a pod remembers the pod's controller
  (a ReplicaSet's Deployment; its ``spec.selector``), in this run and in kvtui's state directory,
  so that a pod replaced by a rollout since is followed into the controller's current pod.
- **Not here**: ``run`` (kube hosts run no shell commands) refuses with a clear message.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import time
from collections import deque
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from kvtui.engines.events import LogRecord
from kvtui.engines.exit_record import stop_record
from kvtui.engines.source_records import command_record, gap_range, gap_record, gap_where, start_missing_record
from kvtui.gpu import (
    QUERY_GPU_FIELD_NAMES,
    QUERY_GPU_LEGACY_FIELD_NAMES,
    GpuProcess,
    GpuSample,
    mark_stale,
    parse_query_gpu_line,
    select_gpus,
)
from kvtui.hosts.backend import BackendError, CommandResult, ConnState, ConnStatus, LogMatch, LogStart
from kvtui.hosts.kube import kubectl_argv as K
from kvtui.hosts.kube.dcgm import parse_dcgm, stale_reason
from kvtui.hosts.kube.memory import recall_controller, remember_controller
from kvtui.hosts.kube.objects import Pod
from kvtui.hosts.kube.ops import KubeOps
from kvtui.hosts.kube.state import (
    ContainerId,
    LogResume,
    NextContainer,
    PodState,
    container_id,
    controller_of,
    current_pod,
    kubectl_error,
    next_container,
    node_order,
    node_rank,
    pod_command,
    pod_end,
    pod_state,
    selector_of,
    siblings_selector,
    split_stamp,
    successor,
)
from kvtui.hosts.metrics import MAX_METRICS_BYTES, MetricsUnavailable, check_metrics
from kvtui.hosts.shellcmd import READY_PATTERNS, SERVER_START_PATTERNS
from kvtui.kube_ref import parse_service_url
from kvtui.liveness import exit_record

if TYPE_CHECKING:
    from kvtui.hosts.service.model import HostOps

SOURCE = "kube"
RETRY_S = 1.0
RETRY_MAX_S = 15.0
COMMAND_TIMEOUT_S = 30.0
POD_POLL_S = 5.0  # how often the pod's state is read again while its log is followed
DCGM_MIN_S = 1.0  # the least time between two reads of a DCGM exporter
# the current boot of a container up for days (``_catch_up``): its log's head through the ready
# line and this many lines more, capped; then the last ``TAIL_LINES`` lines; one gap between
HEAD_CAP_BYTES = 32 << 20
HEAD_MARGIN_LINES = 300
TAIL_LINES = 10_000
_START_RE = re.compile("|".join(SERVER_START_PATTERNS))
_READY_RE = re.compile("|".join(READY_PATTERNS))
# a serving line (SGLang Decode/Prefill batch, vLLM's stats): one before any start means the
# log begins while the server serves (the kubelet rotated the container's log file)
_FORWARD_RE = re.compile(r"^Forwarding from 127\.0\.0\.1:(\d+) -> \d+$")  # kubectl port-forward's line
_SERVING_RE = re.compile(r"\] (?:Decode|Prefill) batch|KV cache usage: |Avg prompt throughput: ")


def _ts(stamp: str) -> datetime | None:
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return None


def rfc3339(dt: datetime) -> str:
    return dt.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class KubeBackend:
    """One pod (or the leader of a selector's group) as a host."""

    def __init__(self, name: str, ref: K.PodRef, *, gpus: Sequence[int] | None = None,
                 clock: Callable[[], float] = time.time, retry_s: float = RETRY_S,
                 pod_poll_s: float | None = None, gpu_metrics_url: str | None = None) -> None:
        self.name = name
        self.ref = ref
        self.gpus = list(gpus) if gpus is not None else None
        self._clock = clock
        self._retry_s = retry_s
        self._status = ConnStatus(ConnState.CONNECTING)
        self._pod: str | None = ref.pod
        self._state: PodState | None = None
        self._obj: Pod | None = None  # the pod as last read
        self._marked = False  # mark_next_boot: the next boot comes after ``_next_after``
        self._next_after: ContainerId | None = None
        self._awaiting_next = False  # a next-boot follow is waiting for the next container
        self._pod_poll_s = POD_POLL_S if pod_poll_s is None else pod_poll_s
        self._watch: asyncio.Task[None] | None = None
        self.gpu_metrics_url = gpu_metrics_url
        # what the last DCGM answer said about whose GPUs it holds: why the samples are stale
        # (exporter unreachable, another node's exporter, no series for this pod), or a caveat
        self.gpu_note: str | None = None
        self._procs: set[asyncio.subprocess.Process] = set()
        self._closed = asyncio.Event()
        self._ctl: tuple[str, str, str] | None = None  # the pod's controller: kind, name, selector

    # -- kubectl ---------------------------------------------------------------------------

    async def _spawn(self, argv: list[str], *, stderr: bool = True, limit: int = 1 << 16,
                     missing: type[Exception] = BackendError) -> asyncio.subprocess.Process:
        """kubectl run with ``argv``, its output piped (its stderr too with ``stderr``), kept until ``_reap``;
        ``missing`` is raised when there is no kubectl on PATH."""
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE if stderr else asyncio.subprocess.DEVNULL, limit=limit)
        except FileNotFoundError:
            raise missing("kubectl not found on PATH: kvtui runs the kubectl you use (your kubeconfig, "
                          "contexts and auth plugins); install it or put it on PATH") from None
        self._procs.add(proc)
        return proc

    async def _kubectl(self, argv: list[str], timeout: float = COMMAND_TIMEOUT_S) -> tuple[int, str, str]:
        proc = await self._spawn(argv)
        try:
            out, err = await asyncio.wait_for(proc.communicate(), timeout)
        except TimeoutError:
            raise BackendError(f"kubectl did not answer within {timeout:g} s: {' '.join(argv[1:6])} …") from None
        finally:  # timed out, or cancelled (the backend closed): not left behind
            await self._reap(proc)
        return proc.returncode or 0, out.decode(errors="replace"), err.decode(errors="replace")

    async def refresh(self) -> PodState:
        """Read the pod again (the leader, for a selector): its state, for the console and the log."""
        obj: Pod | None
        if self.ref.selector:
            rc, out, err = await self._kubectl(K.list_pods(self.ref))
            if rc != 0:
                raise BackendError(_first_line(err) or f"kubectl exited {rc}")
            items = node_order(json.loads(out).get("items") or [])
            if not items:
                raise BackendError(f"no pod matches the selector {self.ref.selector} in namespace "
                                   f"{self.ref.namespace}")
            # the leader; the one followed so far while two have its place (a rolling replacement)
            leaders = [p for p in items if node_rank(p) == node_rank(items[0])]
            obj = next((p for p in leaders if p["metadata"]["name"] == self._pod), items[0])
            self._pod = str(obj["metadata"]["name"])
        else:
            assert self._pod is not None
            rc, out, err = await self._kubectl(K.get_pod(self.ref, self._pod))
            if rc != 0:
                obj = None
                if "(NotFound)" in err:
                    # replaced: the pod its controller made in its place (read before), or the
                    # controller's current pod (remembered from an earlier kvtui: a rollout since)
                    obj = await self._successor() if self._obj is not None else await self._recalled_pod()
                if obj is None:
                    raise BackendError(self._gone_text(_first_line(err) or f"kubectl exited {rc}"))
                self._pod = str(obj["metadata"]["name"])
            else:
                obj = json.loads(out)
        self._obj = obj
        self._state = pod_state(obj, self.ref.container)
        return self._state

    async def _successor(self) -> Pod | None:
        """The pod named by the host is gone: the one its controller made in its place (found by
        the controller's labels, ``state.successor``), when the pod was read before and has a
        controller; None when there is none (yet)."""
        old = self._obj
        ctl = await self._controller(old) if old is not None else None
        if old is None or ctl is None:
            return None
        rc, out, _err = await self._kubectl(K.list_pods(self.ref, ctl[2]))
        try:
            items = json.loads(out).get("items") or [] if rc == 0 else []
        except ValueError:
            items = []
        return successor(items, old)

    def _gone_text(self, error: str) -> str:
        """kubectl's error about the pod, and what kvtui does next when it was replaced."""
        ctl = controller_of(self._obj) if self._obj is not None else self._ctl[:2] if self._ctl else None
        if ctl is None or "(NotFound)" not in error:
            return error
        return f"{error}: waiting for {ctl[0]} {ctl[1]} to make the pod that takes its place"

    # -- the pod's controller: a host named by a pod follows it through its rollouts -------------

    async def _controller(self, pod: Pod) -> tuple[str, str, str] | None:
        """(kind, name, selector) of the controller that makes ``pod``'s successors — a
        ReplicaSet's Deployment (its ``spec.selector`` spans its rollouts), else the owner
        itself —, resolved once and remembered (``learn_controller``); None for a bare pod."""
        if self._ctl is not None:
            return self._ctl
        owner = controller_of(pod)
        if owner is None:
            return None
        kind, name = owner
        fallback = siblings_selector(pod)
        try:
            rc, out, _err = await self._kubectl(K.get_object(self.ref, kind, name))
            obj = json.loads(out) if rc == 0 else None
            if obj is not None and kind == "ReplicaSet":
                up = controller_of(obj)
                if up is not None and up[0] == "Deployment":
                    rc, out, _err = await self._kubectl(K.get_object(self.ref, *up))
                    if rc == 0:
                        kind, name, obj = up[0], up[1], json.loads(out)
        except (BackendError, ValueError):
            obj = None
        sel = (selector_of(obj) if obj is not None else None) or fallback
        if sel is None:
            return None
        if obj is None:
            return (kind, name, sel)  # not remembered: the controller could not be read this time
        await self.learn_controller(kind, name, sel)
        return self._ctl

    async def learn_controller(self, kind: str, name: str, selector: str) -> None:
        """The controller of the pod the host names: kept for this run and remembered (a small
        file in kvtui's state directory, ``kube-hosts/``) so that a later kvtui finds the pod that
        controller runs now when the named one is gone (replaced by a rollout since)."""
        self._ctl = (kind, name, selector)
        if not self.ref.pod:
            return
        with contextlib.suppress(OSError):
            await asyncio.to_thread(remember_controller, self.ref, kind, name, selector)

    async def _recalled_pod(self) -> Pod | None:
        """The pod the host names is gone and was not read in this run: the current pod of its
        controller as an earlier kvtui remembered it (``learn_controller``); None if none."""
        ctl = self._ctl or await asyncio.to_thread(recall_controller, self.ref)
        if ctl is None:
            return None
        self._ctl = ctl
        try:
            rc, out, _err = await self._kubectl(K.list_pods(self.ref, ctl[2]))
            items = json.loads(out).get("items") or [] if rc == 0 else []
        except ValueError:
            items = []
        return current_pod(items, ctl[0], self.ref.pod)

    def pod_object(self) -> Pod | None:
        """The pod's JSON as last read (``refresh``)."""
        return self._obj

    async def kubectl(self, argv: list[str], timeout: float = COMMAND_TIMEOUT_S) -> tuple[int, str, str]:
        """Run one argv of ``kvtui.hosts.kube.kubectl_argv``: (exit status, stdout, stderr)."""
        return await self._kubectl(argv, timeout)

    def mark_next_boot(self, at: float) -> None:
        """Right before a patch or a rollout restart (the pod read just before: ``refresh``): the
        next boot is the container after the one running now, whenever the follow of it starts (a
        patch rolls the pod out at once, before the apply's follower runs). A mark while a
        next-boot follow already waits is that follow's own restart: it knows the old container."""
        del at  # the cluster's own clock (the new container's startedAt) says where its boot starts
        if self._awaiting_next:
            return
        self._marked = True
        self._next_after = container_id(self._obj, self.ref.container) if self._obj is not None else None

    def pod_state(self) -> PodState | None:
        return self._state

    # -- HostBackend -------------------------------------------------------------------------

    def status(self) -> ConnStatus:
        return self._status

    async def start(self) -> None:
        try:
            st = await self.refresh()
        except BackendError as exc:
            self._status = ConnStatus(ConnState.FAILED, str(exc))
            raise
        self._show(st)
        if self._watch is None and self._pod_poll_s > 0:
            self._watch = asyncio.create_task(self._watch_pod(), name=f"kvtui-kube-pod-{self.name}")

    def _show(self, st: PodState) -> None:
        """The connection line carries the pod's state (the console's header shows it): connected
        while the container runs, reconnecting while it waits (Pending, ContainerCreating, a
        CrashLoopBackOff back-off) — with the reason, readiness, restarts and the last end."""
        state = ConnState.CONNECTED if st.state == "running" else ConnState.RECONNECTING
        retry = self._status.retry_in if state is ConnState.RECONNECTING else None
        self._status = ConnStatus(state, f"pod {st.name}: {st.summary(brief=True)}", retry)

    async def _watch_pod(self) -> None:
        """Read the pod again every ``pod_poll_s`` while open: readiness, restarts and waiting
        reasons change without a log line (a readiness probe that starts to pass, a pod evicted)."""
        while not await self._sleep(self._pod_poll_s):
            with contextlib.suppress(BackendError):
                self._show(await self.refresh())

    async def close(self) -> None:
        self._closed.set()
        if self._watch is not None:
            self._watch.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._watch
        for p in list(self._procs):
            with contextlib.suppress(ProcessLookupError):
                p.kill()
        self._status = ConnStatus(ConnState.CLOSED)

    async def follow_log(self, start: LogStart = LogStart.CURRENT_BOOT, after_cursor: str | None = None, *,
                         began: float | None = None) -> AsyncIterator[list[LogRecord]]:
        # ``began`` is not used: a kube stream starts at the clock's now (see the module docstring)
        if self._state is None:
            await self.start()
        assert self._state is not None
        assert self._pod is not None
        if start is LogStart.NEXT_BOOT and after_cursor is None and self._marked:
            async for batch in self.follow_next_boot(lambda: None):
                yield batch
            return
        resume = LogResume()
        if after_cursor:
            got = split_stamp(after_cursor + " ")
            if got is not None:
                resume.last_stamp, resume.last_key = got[0], got[1]
        elif start is LogStart.NEXT_BOOT:
            # the node's clock, not this machine's: what the container printed last (else its start)
            node, last_text = await self._node_now()
            now = node or rfc3339(datetime.fromtimestamp(self._clock(), UTC))
            got = split_stamp(now + " ")
            assert got is not None
            resume.last_stamp, resume.last_key = got[0], got[1]
            if last_text is not None:
                resume.taken_at_last[last_text] += 1  # that line is the running server's, not the next boot's
        restarts = self._state.restarts
        if after_cursor is None and start is LogStart.CURRENT_BOOT and self._state.state in ("running",
                                                                                             "terminated"):
            read = self._pod_key()  # the pod whose log the catch-up reads
            async for batch in self._catch_up(resume):
                yield batch
            if resume.last_stamp is not None:
                # the catch-up's stream ended: follow on from the last line read (the pod read
                # again first: a container that restarted ends its boot with its --previous rest,
                # a pod made again in its place with kvtui's record, as after any drop)
                async for batch in self._follow(resume, restarts, fresh=False, followed=read):
                    yield batch
                return
        async for batch in self._follow(resume, restarts, fresh=True):
            yield batch

    async def _node_now(self) -> tuple[str | None, str | None]:
        """"Now" on the node's clock (the kubelet stamps the lines, the API server takes
        ``--since-time`` in its terms): the stamp of the container's last line (``--tail=1``), or
        its ``startedAt`` when it printed nothing yet; None when neither can be read — with the
        last line's text (None: no line)."""
        assert self._pod is not None
        try:
            rc, out, _err = await self._kubectl(K.logs(self.ref, self._pod, tail=1))
        except BackendError:
            rc, out = 1, ""
        stamped = [got for ln in out.splitlines() if (got := split_stamp(ln)) is not None] if rc == 0 else []
        last = stamped[-1] if stamped else None
        if last is not None:
            return last[0], last[2]
        st = self._state
        return (st.started_at if st is not None and st.state == "running" and st.started_at else None), None

    async def _catch_up(self, resume: LogResume) -> AsyncIterator[list[LogRecord]]:
        """The current boot of a container that may have served for days, without its uptime: the
        current boot is the current container (its ``startedAt``), so its log's head IS the boot's
        start. The head (``--limit-bytes``: from the first line, capped at ``HEAD_CAP_BYTES``) is
        read through the ready line and ``HEAD_MARGIN_LINES`` more — or to its end while the boot
        still starts (or failed) — then, unless the head was the whole log, the last
        ``TAIL_LINES`` lines and on (``--tail -f``), with one ``gap_record`` between them when the tail
        begins after the head's end (``where`` = ``since``/``until``: the stamps around the unread
        lines, what ``search_log`` reads; ``lines`` unknown: counting them would cost the
        uptime). A head that begins with serving lines (the kubelet rotated the container's log
        file: ``kubectl logs`` reads the current file only) says the start is missing and gives
        the container's command line from the pod's spec. ``resume`` ends at the last line read
        (nothing here is read twice: the tail's lines already in the head are dropped); it
        returns when the stream ends (a drop, the container ended) or the backend closes."""
        assert self._pod is not None
        started = ready = missing = False
        after_ready = 0
        done = False
        async with contextlib.aclosing(self._stream(K.logs(self.ref, self._pod, limit_bytes=HEAD_CAP_BYTES), resume,
                                                    drop_partial=True)) as head:
            async for batch in head:
                cut = len(batch)
                for i, rec in enumerate(batch):
                    text = rec.text
                    if not started:
                        if _START_RE.search(text):
                            started = True
                        elif _SERVING_RE.search(text):
                            missing = True
                            cut = i
                            break
                    if ready:
                        after_ready += 1
                    elif started and _READY_RE.search(text):
                        ready = True
                if missing:
                    if cut:
                        yield batch[:cut]
                    yield self._start_missing(batch[cut].ts)
                    yield batch[cut:]
                    done = True
                    break
                yield batch
                if ready and after_ready >= HEAD_MARGIN_LINES:
                    done = True
                    break
        if resume.last_stamp is None:
            return  # nothing read (the container cannot be read yet, or printed nothing)
        if not done and self._last_rc == 0 and self._stream_bytes < HEAD_CAP_BYTES - (1 << 16):
            return  # the head was the whole log: the follow goes on from its end
        head_stamp, head_key = resume.last_stamp, resume.last_key
        resume.resumed()
        gap_said = False
        # the tail is followed in the same stream (``-f --tail``: the kubelet seeks to the last
        # lines; a --since-time follow would make it parse the whole file for the stamps); when
        # it ends, ``_follow`` goes on from its last stamp
        argv = K.logs(self.ref, self._pod, follow=True, tail=TAIL_LINES)
        async with contextlib.aclosing(self._stream(argv, resume)) as tail:
            async for batch in tail:
                first = self._stream_first
                if not gap_said and first is not None:
                    gap_said = True
                    got = split_stamp(first[0] + " ")
                    if got is not None and got[1] > head_key:
                        # the tail begins after the head's end: the lines between are not read
                        yield [gap_record(None, gap_where(since=head_stamp, until=first[0]), _ts(head_stamp),
                                          _ts(first[0]), source=SOURCE)]
                yield batch

    def _start_missing(self, ts: datetime | None) -> list[LogRecord]:
        """kvtui's records for a head that begins while the server serves: the start is not in the
        log (why), and the container's command line from the pod's spec (its flags)."""
        obj = self._obj or {}
        cid = container_id(obj, self.ref.container)
        since = f"; the container started {cid.started_at}" if cid is not None and cid.started_at else ""
        out = [start_missing_record("the kubelet rotated the container's log: kubectl logs begins while it serves"
                                    + since, source=SOURCE, ts=ts)]
        argv = pod_command(obj, self.ref.container)
        if argv:
            out.append(command_record(argv, None, source=SOURCE, ts=ts))
        return out

    async def follow_next_boot(self, positioned: Callable[[], None]) -> AsyncIterator[list[LogRecord]]:
        """The next boot's lines (``PositionedLogSource``): those of the next container (see the
        module docstring), from its own start. Positioned at once: the container running now is
        known (marked, or read here), and whatever the next one prints is its boot."""
        if self._state is None:
            await self.start()
        if self._marked:
            old = self._next_after
            self._marked = False
        else:
            with contextlib.suppress(BackendError):
                await self.refresh()
            old = container_id(self._obj, self.ref.container) if self._obj is not None else None
        self._awaiting_next = True
        try:
            positioned()
            found = await self._next_container(old)
        finally:
            self._awaiting_next = False
        if found is None:
            return  # closed
        self._pod = found.pod
        resume = LogResume()
        got = split_stamp(found.since + " ")
        if got is not None:
            resume.last_stamp, resume.last_key = got[0], got[1]
        async for batch in self._follow(resume, found.restarts, fresh=False):
            yield batch

    async def _next_container(self, old: ContainerId | None) -> NextContainer | None:
        """Look at the pods until the container after ``old`` has started (None: closed)."""
        like = self._obj
        sel = None
        if not self.ref.selector and like is not None and (controller_of(like) or ("", ""))[0] == "ReplicaSet":
            # a Deployment's next pod has another name (and another pod-template-hash, maybe
            # another chart label): the Deployment's own selector finds it
            ctl = await self._controller(like)
            sel = ctl[2] if ctl is not None else siblings_selector(like)
        while not self._closed.is_set():
            pods: list[Pod] = []
            try:
                for argv in ([K.list_pods(self.ref)] if self.ref.selector else
                             [K.get_pod(self.ref, old.pod if old is not None else str(self._pod)),
                              *([K.list_pods(self.ref, sel)] if sel else [])]):
                    rc, out, _err = await self._kubectl(argv)
                    if rc == 0:
                        doc = json.loads(out)
                        pods.extend(doc.get("items") or [] if doc.get("kind") == "List" else [doc])
            except (BackendError, ValueError):
                pods = []
            if self.ref.selector and pods:
                first = node_order(pods)[0]
                pods = [p for p in pods if node_rank(p) == node_rank(first)]
            found = next_container(pods, self.ref.container, old)
            if found is not None:
                return found
            if await self._sleep(self._retry_s):
                return None
        return None

    async def _follow(self, resume: LogResume, restarts: int, *, fresh: bool,
                      followed: tuple[str, str | None] | None = None) -> AsyncIterator[list[LogRecord]]:
        """Follow ``self._pod``'s container from ``resume`` on: ``restarts`` is the restart count
        of the container followed (a higher one: it restarted); ``fresh``: the pod was just read;
        ``followed``: the pod (name, uid) whose log was read so far, when known."""
        assert self._pod is not None
        delay = self._retry_s
        pause = 0.0  # before the next look at the pod: 0 after a stream that ended, else the back-off
        ended = False  # the last stream ended by itself (exit 0), not dropped
        # the pod whose container is followed (name, uid): the one just read, else the next read's
        if followed is None and fresh:
            followed = self._pod_key()
        while not self._closed.is_set():
            if pause and await self._sleep(pause):
                return
            if not fresh:
                # the pod is read again before every stream: a container that restarted since the
                # last look is handled first (its tail, how it ended), so the new container's lines
                # never come before the old one's end — whether it restarted while its stream was
                # open, during a back-off, or before it printed anything
                before = self._obj  # the followed pod as last read: how it ended, if it is gone
                try:
                    st = await self.refresh()
                except BackendError as exc:
                    self._status = ConnStatus(ConnState.RECONNECTING, str(exc), retry_in=delay)
                    pause, delay = delay, min(delay * 2, RETRY_MAX_S)
                    continue
                if followed is None:
                    followed = self._pod_key()
                elif self._pod_key() != followed:
                    # the pod was deleted and its controller made another (a new name, or the same
                    # name and a new uid): its boot ended; the new pod's whole log is the next one
                    stopped, how = pod_end(before, self.ref.container)
                    said = (f"pod {followed[0]} is gone; following {st.name}, which its controller made in its "
                            f"place; {how}")
                    yield [stop_record(said, source=SOURCE) if stopped else exit_record(None, said, source=SOURCE)]
                    followed, restarts, resume = self._pod_key(), st.restarts, LogResume()
                    delay, ended = self._retry_s, False
                    if st.state != "running":
                        self._status = ConnStatus(ConnState.RECONNECTING, f"pod {st.name}: {st.summary(brief=True)}",
                                                  retry_in=delay)
                        pause = delay
                        continue
                if st.restarts > restarts:
                    restarts = st.restarts
                    yield await self._ended_container(st, resume)
                    delay = self._retry_s
                    ended = False  # its stream ended with it: follow the new one at once
                elif st.state != "running":
                    # waiting (ContainerCreating, CrashLoopBackOff back-off) or ended: nothing new to
                    # read until it runs (or restarts); look again after the back-off
                    self._status = ConnStatus(ConnState.RECONNECTING, f"pod {st.name}: {st.summary(brief=True)}",
                                              retry_in=delay)
                    pause, delay = delay, min(delay * 2, RETRY_MAX_S)
                    continue
                self._status = ConnStatus(ConnState.CONNECTED, f"pod {st.name}: {st.summary(brief=True)}")
                if ended and await self._sleep(self._retry_s):
                    # the stream ended while the same container runs on (the kubelet rotated its
                    # log file: kubectl logs -f stops there): follow again, a moment later
                    return
            fresh = False
            resume.resumed()
            argv = K.logs(self.ref, self._pod, follow=True, since_time=resume.since_time())
            read = False
            async for batch in self._stream(argv, resume):
                delay = self._retry_s
                read = True
                yield batch
            if self._closed.is_set():
                return
            ended = self._last_rc == 0
            if ended:
                pause = 0.0  # the container ended (kubectl logs -f ends with it): look at once
            else:
                # a dropped stream, or a container that cannot be read (yet: not created, no log):
                # a new stream after the back-off, from the last stamp
                self._status = ConnStatus(ConnState.RECONNECTING, "kubectl logs ended: following again",
                                          retry_in=delay)
                pause = self._retry_s if read else delay
                if not read:
                    delay = min(delay * 2, RETRY_MAX_S)

    def _pod_key(self) -> tuple[str, str | None]:
        """The pod as last read: its name and uid (a pod made again under its name has another)."""
        meta = (self._obj or {}).get("metadata") or {}
        return str(self._pod), meta.get("uid")

    async def _ended_container(self, st: PodState, resume: LogResume) -> list[LogRecord]:
        """A container ended and a new one runs (or waits to): the ended one's last lines not yet
        read (``--previous``, from the last stamp), then a record saying how it ended."""
        assert self._pod is not None
        tail: list[LogRecord] = []
        async for batch in self._stream(K.logs(self.ref, self._pod, previous=True,
                                               since_time=resume.since_time()), resume, prior=True):
            tail.extend(batch)
        how = st.last.words() if st.last is not None else "restarted"
        ended = _ts(st.last.finished_at) if st.last is not None and st.last.finished_at else None
        tail.append(exit_record(None, f"container {st.container or ''}: {how}".strip(),
                                ts=tail[-1].ts if tail else ended, source=SOURCE))
        self._status = ConnStatus(ConnState.CONNECTED, f"pod {st.name}: {st.summary(brief=True)}")
        return tail

    _last_rc: int | None = None
    _last_err: str = ""
    _stream_bytes = 0  # what the last ``kubectl logs`` run printed so far
    _stream_first: tuple[str, int] | None = None  # its first stamped line: (stamp, its key)
    bytes_read = 0  # every byte ``kubectl logs`` printed to this backend (the bench and tests read it)

    async def _stream(self, argv: list[str], resume: LogResume, *, prior: bool = False, drop_partial: bool = False,
                      errors: bool = False) -> AsyncGenerator[list[LogRecord], None]:
        """The records of one ``kubectl logs`` run, de-duplicated; ``_last_rc`` its exit status;
        ``drop_partial``: a last line without its newline is left out (``--limit-bytes`` cut it);
        ``errors``: its stderr kept in ``_last_err``."""
        if prior:
            resume.resumed()
        async with contextlib.aclosing(self._lines(argv, drop_partial=drop_partial, errors=errors)) as chunks:
            async for lines in chunks:
                records = []
                for text in lines:
                    if self._stream_first is None:
                        first = split_stamp(text)
                        if first is not None:
                            self._stream_first = (first[0], first[1])
                    got = resume.accept(text)
                    if got is None:
                        continue
                    stamp, body = got
                    records.append(LogRecord(body, _ts(stamp) if stamp else None, stamp or None, SOURCE))
                if records:
                    yield records

    async def _lines(self, argv: list[str], *, drop_partial: bool = False,
                     errors: bool = False) -> AsyncGenerator[list[str], None]:
        """The lines of one ``kubectl logs`` run as they come (64 KiB at a time, never more: a
        reader that stops early leaves the rest unsent); ``_last_rc`` its exit status."""
        self._last_rc = None
        self._last_err = ""
        self._stream_bytes = 0
        self._stream_first = None
        proc = await self._spawn(argv, stderr=errors, limit=1 << 17)
        assert proc.stdout is not None
        try:
            carry = b""
            while True:
                chunk = await proc.stdout.read(1 << 16)
                self._stream_bytes += len(chunk)
                self.bytes_read += len(chunk)
                lines = (carry + chunk).split(b"\n")
                carry = lines.pop() if chunk else b""
                if not chunk and (lines == [b""] or drop_partial):
                    lines = []
                if lines:
                    yield [raw.decode(errors="replace").rstrip("\r") for raw in lines]
                if not chunk:
                    break
            if errors and proc.stderr is not None:
                self._last_err = (await proc.stderr.read()).decode(errors="replace")
            self._last_rc = await proc.wait()
        finally:
            await self._reap(proc)

    async def _reap(self, proc: asyncio.subprocess.Process) -> None:
        """A kubectl stream ends (or is cancelled): killed if still running, waited for, forgotten."""
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            with contextlib.suppress(Exception):
                await proc.wait()
        self._procs.discard(proc)

    async def search_log(self, pattern: str, where: str, *, regex: bool = False, ignore_case: bool = True,
                         context: int = 0, limit: int = 100, newest: bool = False) -> list[LogMatch]:
        """Lines of a gap this backend yielded (``where``: ``since``/``until``, the stamps around the
        unread lines) that contain ``pattern`` (``SearchableLog``).

        This costs the uptime, unlike a file's or a journal's search: kubectl has no server-side
        grep — the log API filters by time (``sinceTime``, whole seconds), by the last N lines and
        by a byte count only — so ``kubectl logs --since-time=SINCE --timestamps`` sends every line
        from the gap's first second on and the filter runs here. The lines stream through and
        are not kept (memory stays bounded: ``limit`` matches and their context), the stream
        stops at ``until`` (lines after the gap are never read) and, oldest first, at the
        ``limit``-th match. A range older than the current container (it started after
        ``until``) is read from ``--previous``: the kubelet keeps one ended container's log."""
        rng = gap_range(where)
        lo = split_stamp(rng.get("since", "") + " ")
        hi = split_stamp(rng["until"] + " ") if rng.get("until") else None
        if lo is None:
            raise BackendError(f"not a range of a kube log (since=…, until=…): {where}")
        st = await self.refresh()
        cid = container_id(self._obj, self.ref.container) if self._obj is not None else None
        began = split_stamp(cid.started_at + " ") if cid is not None and cid.started_at else None
        previous = hi is not None and began is not None and began[1] > hi[1] and st.restarts > 0
        try:
            rx = re.compile(pattern if regex else re.escape(pattern), re.IGNORECASE if ignore_case else 0)
        except re.error as exc:
            raise BackendError(f"not a regular expression: {pattern!r} ({exc})") from None
        assert self._pod is not None
        argv = K.logs(self.ref, self._pod, since_time=rng["since"], previous=previous)
        ctx = max(0, int(context))
        want = max(1, int(limit))
        found: deque[LogMatch] = deque(maxlen=want if newest else None)
        before: deque[str] = deque(maxlen=ctx or 1)
        waiting: list[tuple[str, tuple[str, ...], list[str], int]] = []  # a match waiting for its context
        lo_sec, hi_sec = lo[0][:19], hi[0][:19] if hi is not None else None
        n = 0
        stop = False

        def record(line: str) -> LogRecord:
            stamp, _, body = line.partition(" ")
            return LogRecord(body, _ts(stamp), stamp, SOURCE)

        def match(line: str, b: Sequence[str], a: Sequence[str], k: int) -> LogMatch:
            return LogMatch(record(line), tuple(record(x) for x in b), tuple(record(x) for x in a), k)

        async with contextlib.aclosing(self._lines(argv, errors=True)) as chunks:
            async for lines in chunks:
                for line in lines:
                    # the stamp's second decides alone, but within the gap's first or last second
                    sec = line[:19]
                    if sec <= lo_sec:
                        got = split_stamp(line) if sec == lo_sec else None
                        if got is None or got[1] <= lo[1]:
                            continue  # the head's lines (the API sends the whole first second)
                    if hi is not None and hi_sec is not None and sec >= hi_sec:
                        got = split_stamp(line) if sec == hi_sec else None
                        if got is None or got[1] >= hi[1]:
                            stop = True  # the tail's first line: the gap is over
                            break
                    n += 1
                    for w in waiting:
                        w[2].append(line)
                    while waiting and len(waiting[0][2]) >= ctx:
                        m, bf, af, k = waiting.pop(0)
                        found.append(match(m, bf, af, k))
                    if not newest and len(found) >= want:
                        stop = True
                        break
                    if rx.search(line[line.find(" ") + 1:]) and (newest or len(found) + len(waiting) < want):
                        if ctx:
                            waiting.append((line, tuple(before), [], n))
                        else:
                            found.append(match(line, (), (), n))
                    if ctx:
                        before.append(line)
                    if not newest and not waiting and len(found) >= want:
                        stop = True
                        break
                if stop:
                    break
        if not stop and self._last_rc not in (0, None) and n == 0:
            raise BackendError(_first_line(self._last_err) or f"kubectl logs exited {self._last_rc}")
        for m, bf, af, k in waiting:
            found.append(match(m, bf, af, k))
        return list(found)[:want]

    async def gpu_stream(self, interval_s: float = 1.0) -> AsyncIterator[list[GpuSample]]:
        if self._state is None:
            await self.start()
        if self.gpu_metrics_url:
            async for batch in self._dcgm_stream(interval_s):
                yield batch
            return
        assert self._pod is not None
        last: list[GpuSample] = []
        delay = self._retry_s
        fields = QUERY_GPU_FIELD_NAMES
        while not self._closed.is_set():
            argv = K.exec_gpu_query(self.ref, self._pod, fields,
                                    interval_ms=int(max(0.01, interval_s) * 1000))
            parsed = 0
            proc = await self._spawn(argv, stderr=False)
            assert proc.stdout is not None
            tick: list[GpuSample] = []
            size: int | None = None
            try:
                while True:
                    raw = await proc.stdout.readline()
                    if not raw:
                        break
                    s = parse_query_gpu_line(raw.decode(errors="replace"), self._clock())
                    if s is None:
                        continue
                    parsed += 1
                    if tick and s.index <= tick[-1].index:
                        size = len(tick)
                        last = select_gpus(tick, self.gpus)
                        yield last
                        tick = []
                    tick.append(s)
                    if size is not None and len(tick) == size:
                        last = select_gpus(tick, self.gpus)
                        yield last
                        tick = []
                        delay = self._retry_s
                await proc.wait()
            finally:
                await self._reap(proc)
            if not parsed and fields != QUERY_GPU_LEGACY_FIELD_NAMES and await self._rejects_fields(fields):
                # an nvidia-smi that knows no power limit or throttle reasons: the older fields
                fields = QUERY_GPU_LEGACY_FIELD_NAMES
            if last:
                yield mark_stale(last)
            if await self._sleep(delay):
                return
            delay = min(delay * 2, RETRY_MAX_S)

    async def _rejects_fields(self, fields: Sequence[str]) -> bool:
        """Whether the container's nvidia-smi refuses one of ``fields`` ("… is not a valid field
        to query"): asked once, after a stream that gave not one reading."""
        assert self._pod is not None
        try:
            _rc, out, err = await self._kubectl(K.exec_gpu_query(self.ref, self._pod, fields))
        except BackendError:
            return False
        return "not a valid field" in out + err

    async def _dcgm_stream(self, interval_s: float) -> AsyncIterator[list[GpuSample]]:
        """GPU memory from a DCGM exporter (``gpu_metrics_url``): its /metrics read through the API
        server's service proxy (``kubectl get --raw``; the URL is reached from inside the cluster,
        never from here) every ``interval_s`` (at least ``DCGM_MIN_S``: the exporter itself
        collects every few seconds); an answer that fails, or comes from another node's exporter,
        leaves the last samples marked stale, as an SSH host's are while it reconnects."""
        assert self.gpu_metrics_url is not None
        argv = K.get_raw(self.ref, parse_service_url(self.gpu_metrics_url).proxy_path())
        last: list[GpuSample] = []
        every = max(DCGM_MIN_S, interval_s)
        while not self._closed.is_set():
            try:
                rc, out, err = await self._kubectl(argv)
            except BackendError as exc:
                rc, out, err = -1, "", str(exc)
            pod = self._pod if self._pod is not None else None
            reading = parse_dcgm(out, self._clock(), namespace=self.ref.namespace, pod=pod) if rc == 0 else None
            if reading is not None and reading.samples:
                self.gpu_note = None if reading.filtered else (
                    "the exporter maps no GPU to a pod: every GPU of its answer is shown")
                last = select_gpus(reading.samples, self.gpus)
                yield last
            else:
                self.gpu_note = stale_reason(reading, _first_line(err) or f"kubectl exited {rc}",
                                             namespace=self.ref.namespace, pod=pod,
                                             node=self._state.node if self._state is not None else None)
                if last:
                    yield mark_stale(last)
            if await self._sleep(every):
                return

    async def metrics(self, port: int, *, timeout: float = 10.0) -> str:
        """The server's ``/metrics`` through the API server's pod proxy (``kubectl get --raw
        /api/v1/namespaces/NS/pods/POD:PORT/proxy/metrics``; ``kvtui.hosts.metrics``): the pod's
        port reached from inside the cluster, never from here."""
        if self._pod is None:
            raise MetricsUnavailable(f"{self.name}: no pod yet: its /metrics cannot be read")
        path = K.pod_proxy_path(self.ref, self._pod, port, "/metrics")
        where = f"kubectl get --raw {path}"
        try:
            rc, out, err = await self._kubectl(K.get_raw(self.ref, path), timeout=timeout)
        except BackendError as exc:
            raise MetricsUnavailable(f"{where}: {exc}") from exc
        if rc != 0:
            first = _first_line(err) or f"kubectl exited {rc}"
            if "(NotFound)" in first:  # the server answered 404: no /metrics (SGLang without --enable-metrics)
                check_metrics(404, b"", where)
            raise MetricsUnavailable(f"{where}: {first}")
        return check_metrics(200, out.encode()[:MAX_METRICS_BYTES], where)

    @contextlib.asynccontextmanager
    async def open_port(self, port: int) -> AsyncIterator[tuple[str, int]]:
        """``PortOpener``: ``kubectl port-forward pod/POD :PORT --address 127.0.0.1`` to the pod
        followed now (after a rollout, the new one); yields the local loopback address it
        prints, and ends the forward after. Raises ``OSError`` with kubectl's words when no
        forward comes up (the pod not running, no such pod, an unreachable cluster)."""
        if self._state is None:
            await self.start()
        assert self._pod is not None
        argv = K.port_forward(self.ref, self._pod, port)
        proc = await self._spawn(argv, missing=OSError)
        try:
            assert proc.stdout is not None
            assert proc.stderr is not None
            local: int | None = None
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(COMMAND_TIMEOUT_S):
                    while local is None:
                        raw = await proc.stdout.readline()
                        if not raw:
                            break
                        m = _FORWARD_RE.match(raw.decode(errors="replace").strip())
                        if m is not None:
                            local = int(m.group(1))
            if local is None:
                err = ""
                if proc.returncode is not None or proc.stdout.at_eof():
                    with contextlib.suppress(TimeoutError):
                        err = (await asyncio.wait_for(proc.stderr.read(1 << 16), 5)).decode(errors="replace")
                raise OSError(_first_line(err) or f"kubectl port-forward to pod {self._pod} port {port} did not start")
            yield "127.0.0.1", local
        finally:
            await self._reap(proc)

    async def gpu_processes(self) -> list[GpuProcess]:
        return []  # a container's nvidia-smi sees its own processes only: nothing to attribute

    async def server_pids(self) -> set[int]:
        return set()

    async def run(self, command: str, *, input: bytes | None = None, timeout: float | None = 60.0) -> CommandResult:
        raise BackendError("a kube host runs no shell commands (kvtui reads it through kubectl logs, exec "
                           "nvidia-smi and get)")

    def service_ops(self) -> HostOps:
        """``KubeOps``: it says why a pod is neither edited nor restarted by kvtui (yet)."""
        return KubeOps(self)

    async def _sleep(self, seconds: float) -> bool:
        """Wait; True when the backend was closed meanwhile."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._closed.wait(), seconds)
        return self._closed.is_set()


def _first_line(text: str) -> str:
    """kubectl's error in one line (not client-go's klog lines before it: ``kubectl_error``)."""
    return kubectl_error(text)
