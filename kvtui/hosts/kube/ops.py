"""``KubeOps``: the guarded service's view of a kube host. The server's flags live in the args of
its container in the pod's controller (Deployment, StatefulSet, LeaderWorkerSet: every pod
template of it), not in a file; the service's flow (plan, diff, prediction, confirm, write,
restart, follow, verify the new boot's argument dump, roll back) is the same as for a unit file.

- **locate**: the pod's controller, walked up (ReplicaSet → Deployment, StatefulSet → the
  LeaderWorkerSet that owns it); its container's command line as the text ``kvtui.flags`` edits
  (``state.args_text``: an ``sh -c`` script is the script, an exec form its words). The "file" is
  named ``kube:CONTEXT/NAMESPACE/KIND/NAME``.
- **plan** (``edit_steps`` + ``preview``): the same edit on every pod template (a LeaderWorkerSet's
  leader and workers), as a JSON patch whose ``test`` operations make the API server refuse it if
  the args changed since they were read; then ``kubectl patch --dry-run=server``: the plan's diff
  is the args as the API server would store them (admission and defaulting included), or its
  refusal. An object Helm / Argo CD / Flux manages is refused unless ``--force`` (they would
  revert the patch), with the change to commit to the chart instead.
- **env** (``--setenv`` / ``--unsetenv``): the container's ``env`` list in every pod template,
  patched beside the args (``env_apart``: the args text is not where the variables live): a
  variable set there gets the new value, a new one is appended, a removed one loses every entry;
  a ``valueFrom``, a variable the list does not set (to remove) and one the container's own
  command line assigns are refused. The backup keeps the lists; the new pod's container must
  carry the edits (``process_env``).
- **write**: read the object again (changed since planned: refused, 4), save its current args
  (the backup: ``$XDG_STATE_HOME/kvtui/kube-backups/``, one JSON file per backup; a rollback
  restores every template's args from it), patch, check what the API server stored (else the old
  args are patched back). Writing the template *is* the restart: the controller rolls the pod
  out (the apply's follower takes the next container's lines: the pod is read right before the
  patch, ``KubeBackend.mark_next_boot``; the old pod's late lines never count).
- **restart**: ``kubectl rollout status`` followed in the background (its last line is said) and
  awaited before the new boot is called ready (``rollout_settled``: ready on a kube host is the
  new pod's boot ready *and* the rollout complete); the console's plain restart is ``kubectl
  rollout restart``. The new pod's boot is followed like a container restart (``KubeBackend``).
  Without ``--restart`` the outcome is ``rolling`` (``restarts_on_write``): the patch rolled the
  pod out, kvtui did not follow it.
"""

from __future__ import annotations

import asyncio
import contextlib
import difflib
import hashlib
import json
import os
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from kvtui import envedit as ev
from kvtui import flags as fl
from kvtui.exits import EXIT_INPUT, EXIT_REFUSED
from kvtui.hosts.backend import BackendError
from kvtui.hosts.kube import kubectl_argv as K
from kvtui.hosts.kube.objects import Backup, Controller, EnvVar, KubeObject
from kvtui.hosts.kube.state import (
    ArgsError,
    ArgsSite,
    ArgsText,
    EditedEnvEntry,
    EnvSite,
    Manager,
    args_text,
    args_values,
    chart_patch,
    container_args,
    container_env,
    controller_of,
    edit_env,
    env_patch_ops,
    env_values,
    gitops_manager,
    kubectl_error,
    patch_ops,
    pick_container,
    plain_env,
    selector_of,
    siblings_selector,
    site_values,
    yaml_env,
    yaml_list,
)
from kvtui.hosts.service.model import BACKUP_MARK, PRE_ROLLBACK, FlagSource, PlanStep, Refusal, ServiceError

if TYPE_CHECKING:
    from kvtui.config import HostConfig
    from kvtui.hosts.kube.backend import KubeBackend
    from kvtui.hosts.service.model import ApplyPlan, RestartCall, RestartHow, RestartPlan, Run

ROLLOUT_FALLBACK_S = 1800
_CONTROLLERS = ("Deployment", "StatefulSet", "LeaderWorkerSet")


def backups_dir() -> Path:
    xdg = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(xdg) / "kvtui" / "kube-backups"


def backup_file(name: str) -> Path:
    """The local file of a backup named ``kube:CTX/NS/KIND/NAME.kvtui-STAMP`` (one flat directory;
    ``/`` and ``:`` are escaped)."""
    return backups_dir() / (name.replace("%", "%25").replace("/", "%2F").replace(":", "%3A") + ".json")


def _name_of(path: Path) -> str:
    return path.name.removesuffix(".json").replace("%3A", ":").replace("%2F", "/").replace("%25", "%")


@dataclass(slots=True)
class _Target:
    kind: str
    name: str
    obj: Controller
    sites: list[ArgsText]
    manager: Manager | None
    via: tuple[str, ...]
    envs: list[EnvSite]  # the container's env list in each pod template (the sites' order)


class KubeOps:
    def __init__(self, backend: KubeBackend) -> None:
        self._backend = backend
        self._target: _Target | None = None
        self._rollout: asyncio.Task[None] | None = None
        self._rollout_problem: str | None = None

    @property
    def backend(self) -> KubeBackend:
        return self._backend

    @property
    def readonly(self) -> bool:
        return False  # "readonly = true" in hosts.toml is the config's own refusal

    @property
    def login(self) -> str | None:
        return None  # the operator's kubeconfig user: kvtui does not know it

    @property
    def env_apart(self) -> bool:
        """``--setenv`` / ``--unsetenv`` edit the container's ``env`` list, not the args text."""
        return True

    @property
    def restarts_on_write(self) -> bool:
        """Writing the pod template *is* the restart: the controller rolls the pod out at once."""
        return True

    @property
    def settle_s(self) -> float:
        # unused: the backend is a PositionedLogSource (the next boot is the next container,
        # known before the restart; ``mark_next_boot``)
        return 0.0

    # -- reading -------------------------------------------------------------------------------

    async def _get(self, kind: str, name: str) -> Controller:
        rc, out, err = await self._kubectl(K.get_object(self._backend.ref, kind, name))
        if rc != 0:
            raise ServiceError(f"kubectl get {kind.lower()}/{name}: {_first_line(err) or f'exit {rc}'}", EXIT_INPUT)
        obj: Controller = json.loads(out)
        return obj

    async def _kubectl(self, argv: list[str]) -> tuple[int, str, str]:
        try:
            return await self._backend.kubectl(argv)
        except BackendError as exc:
            raise ServiceError(str(exc), EXIT_INPUT) from exc

    async def _owner(self) -> tuple[str, str, Controller, tuple[str, ...]]:
        """The controller whose pod template holds the server's container: (kind, name, object, how)."""
        try:
            await self._backend.refresh()
        except BackendError as exc:
            raise ServiceError(str(exc), EXIT_INPUT) from exc
        pod = self._backend.pod_object()
        assert pod is not None
        here: KubeObject = pod
        via = [f"pod {pod['metadata']['name']}"]
        found: tuple[str, str, Controller] | None = None
        for _ in range(6):
            owner = controller_of(here)
            if owner is None:
                break
            kind, name = owner
            if kind not in (*_CONTROLLERS, "ReplicaSet", "Pod"):
                break
            here = await self._get(kind, name)
            via.append(f"{kind}/{name}")
            if kind in _CONTROLLERS:
                found = (kind, name, here)
                if kind != "StatefulSet":
                    break  # a StatefulSet may belong to a LeaderWorkerSet: look one further
        if found is not None and found[0] in ("Deployment", "StatefulSet"):
            # a host named by this pod follows the controller's pods from now on (a rollback after
            # the rollout replaced it, in this kvtui or a later one)
            sel = selector_of(found[2]) or siblings_selector(pod)
            if sel is not None:
                await self._backend.learn_controller(found[0], found[1], sel)
        if found is None:
            raise ServiceError(
                f"pod {pod['metadata']['name']} has no Deployment, StatefulSet or LeaderWorkerSet above it "
                f"({' → '.join(via)}): a bare pod's args cannot change; edit its manifest and recreate it",
                EXIT_REFUSED)
        return found[0], found[1], found[2], tuple(via)

    async def locate(self, name: str, host: HostConfig) -> FlagSource:
        kind, oname, obj, via = await self._owner()
        container = self._backend.ref.container
        sites = container_args(obj, container)
        if not sites:
            raise ServiceError(f"{kind}/{oname}: no container {container or '(first)'} in its pod template",
                               EXIT_INPUT)
        try:
            texts = [args_text(s) for s in sites]
        except ArgsError as exc:
            raise ServiceError(f"{kind}/{oname}: {exc}", EXIT_REFUSED) from exc
        self._target = _Target(kind, oname, obj, texts, gitops_manager(obj), via, container_env(obj, container))
        text = texts[0].text
        return FlagSource(
            "script", self.source_name(kind, oname), text, hashlib.sha256(text.encode()).hexdigest(),
            via=(*via, *(f"container {container or '(first)'} at {s.path.rsplit('/', 1)[0]}" for s in sites)),
            files=tuple(s.path for s in sites),
        )

    def source_name(self, kind: str, name: str) -> str:
        ref = self._backend.ref
        return f"kube:{ref.context or '(current)'}/{ref.namespace}/{kind.lower()}/{name}"

    async def list_backups(self, host: HostConfig, source: FlagSource) -> list[str]:
        d = backups_dir()
        if not d.is_dir():
            return []
        names = [_name_of(p) for p in d.iterdir() if p.name.endswith(".json")]
        mine = [n for n in names if n.startswith(source.path + BACKUP_MARK) and not n.endswith(PRE_ROLLBACK)]
        return sorted(mine)

    def taken_names(self, source: FlagSource) -> list[str]:
        d = backups_dir()
        return [_name_of(p) for p in d.iterdir()] if d.is_dir() else []

    def _read_backup(self, path: str) -> Backup:
        try:
            doc: Backup = json.loads(backup_file(path).read_text())
        except (OSError, ValueError) as exc:
            raise ServiceError(f"{path}: cannot read this backup ({backup_file(path)}: {exc})", EXIT_INPUT) from exc
        return doc

    async def read_copy(self, host: HostConfig, path: str) -> str:
        return str(self._read_backup(path)["text"])

    async def copy_sha256(self, host: HostConfig, path: str) -> str:
        try:
            return hashlib.sha256(str(self._read_backup(path)["text"]).encode()).hexdigest()
        except ServiceError:
            return ""

    # -- planning ------------------------------------------------------------------------------

    def edit_steps(self, plan: ApplyPlan) -> tuple[list[PlanStep], dict[str, str]]:
        t = self._target
        assert t is not None, "locate() first"
        new: list[tuple[tuple[str, ...], tuple[str, ...]]] = []  # every site's (command, args) after
        envs: list[list[EnvVar]] = []  # every site's env list after
        try:
            if plan.action == "rollback":
                doc = self._read_backup(plan.backup_path)
                saved = {s["path"]: (tuple(s["command"]), tuple(s["args"])) for s in doc["sites"]}
                new = [saved.get(at.site.path, (at.site.command, at.site.args)) for at in t.sites]
                envs = self._rollback_env(plan, doc)
            else:
                for i, at in enumerate(t.sites):
                    text = plan.new_text if i == 0 else fl.apply_edits(at.text, "script", plan.edits).new_text
                    new.append(args_values(at, text))
                envs = self._edited_env(plan)
        except (ArgsError, fl.FlagError) as exc:
            plan.refusals.append(Refusal(f"{t.kind}/{t.name}: {exc}", False))
            return [], {}
        sites = [at.site for at in t.sites]
        ops = [op for site, (c, a) in zip(sites, new, strict=True) for op in patch_ops(site, c, a)]
        undo = [op for site, (c, a) in zip(sites, new, strict=True)
                for op in patch_ops(ArgsSite(site.path, a, c), site.command, site.args)]
        ops += [op for es, entries in zip(t.envs, envs, strict=True) for op in env_patch_ops(es, entries)]
        undo += [op for es, entries in zip(t.envs, envs, strict=True)
                 for op in env_patch_ops(EnvSite(es.path, tuple(entries)), es.entries)]
        ref = self._backend.ref
        patch = K.patch_json(ref, t.kind, t.name, ops, dry_run=False)
        dry = K.patch_json(ref, t.kind, t.name, ops, dry_run=True)
        rollout = K.rollout_status(ref, t.kind, t.name, timeout_s=int(plan.timeout or ROLLOUT_FALLBACK_S))
        if t.manager is not None:
            m = t.manager
            release = f" (release {m.release})" if m.release else ""
            moved = [(site, c, a) for site, (c, a) in zip(sites, new, strict=True) if (c, a) != (site.command,
                                                                                                  site.args)]
            what = "args" if not plan.env_changed else "env" if not moved else "args and env"
            text = chart_patch(t.kind, t.name, ref.container, moved) if moved else \
                f"# {t.kind}/{t.name}: commit this to the chart or repository that renders it"
            for es, entries in zip(t.envs, envs, strict=True):
                if [dict(e) for e in es.entries] != entries:
                    tmpl = es.path.rsplit("/spec/containers/", 1)[0].strip("/").replace("/", ".")
                    text += f"\n# {tmpl}.spec.containers[name={ref.container or '(first)'}]\n"
                    text += "\n".join(yaml_env(entries))
            plan.refusals.append(Refusal(
                f"{t.kind}/{t.name} is managed by {m.tool}{release} ({m.evidence}): {m.tool} would put the old {what} "
                f"back at its next sync, silently. Commit the change to the chart / repository instead "
                f"(or pass --force to patch the live object anyway):\n" + text,
                True))
        steps = [
            PlanStep(f"check that {t.kind}/{t.name} still has the args and env read ({len(sites)} pod template"
                     f"{'s' if len(sites) != 1 else ''}; the patch's test operations hold it on the server too)"),
            PlanStep("server-side dry run of the patch (done while planning: the diff above is its result)",
                     shlex.join(dry)),
            PlanStep(f"save the current args and env as {plan.saved_copy} (in {backups_dir()})"),
            PlanStep(f"patch the {t.kind}'s pod template: the controller rolls the pod out", shlex.join(patch)),
        ]
        if plan.restart:
            steps.append(PlanStep("follow the rollout and the new pod's boot", shlex.join(rollout)))
        else:
            plan.warnings.append(f"a kube host restarts when its template changes: {t.kind}/{t.name} rolls the pod "
                                 "out as soon as it is patched (without --restart kvtui does not follow it)")
        container = ref.container
        return steps, {
            "kind": t.kind, "name": t.name, "patch": json.dumps(ops), "undo": json.dumps(undo),
            "read": json.dumps(site_values(t.obj, container)), "before": json.dumps(t.obj),
            "expected": json.dumps([[list(c), list(a)] for c, a in new]),
            "read_env": json.dumps(env_values(t.obj, container)), "expected_env": json.dumps(envs),
        }

    def _edited_env(self, plan: ApplyPlan) -> list[list[EnvVar]]:
        """Every pod template's env list after the plan's ``--setenv`` / ``--unsetenv`` (the same
        edits on each; the first template's changes are the plan's). A variable the container's own
        ``sh -c`` script (or an ``env NAME=…`` prefix) assigns is refused: it would override the
        env list, and the edit would do nothing."""
        t = self._target
        assert t is not None
        if not plan.env_edits:
            return [[e.copy() for e in es.entries] for es in t.envs]
        for at in t.sites:
            try:
                own = ev.effective_env(at.text, "script")
            except fl.FlagError:
                own = {}
            mine = [e.name for e in plan.env_edits if e.name in own]
            if mine:
                raise ArgsError(f"the container's command line assigns {', '.join(mine)} itself "
                                f"({mine[0]}={own[mine[0]]}), which overrides its env list: edit that with --set, or "
                                "the manifest")
        out: list[list[EnvVar]] = []
        for i, es in enumerate(t.envs):
            entries, changes = edit_env(es, [(e.name, e.value) for e in plan.env_edits])
            out.append(entries)
            if i == 0:
                plan.changes.extend(_change(c) for c in changes)
        plan.env_changed = any(entries != [dict(e) for e in es.entries] for es, entries in zip(t.envs, out,
                                                                                                 strict=True))
        return out

    def _rollback_env(self, plan: ApplyPlan, doc: Backup) -> list[list[EnvVar]]:
        """Every pod template's env list as the backup saved it (a backup from before env was saved:
        as it is now); the plan's ``env_edits`` are the difference, checked on the new pod."""
        t = self._target
        assert t is not None
        saved = {s["path"].rsplit("/", 1)[0]: s["env"] for s in doc["sites"] if "env" in s}
        out = [[e.copy() for e in saved.get(es.path.rsplit("/", 1)[0], es.entries)] for es in t.envs]
        if t.envs:
            now, then = plain_env(t.envs[0].entries), plain_env(out[0])
            edits = [ev.EnvEdit(k, v) for k, v in then.items() if now.get(k) != v]
            edits += [ev.EnvEdit(k, None) for k in now if k not in then]
            plan.env_edits = edits
            names = [str(x.get("name")) for x in out[0]] + [str(x.get("name")) for x in t.envs[0].entries]
            plan.changes.extend(_change(EditedEnvEntry(e.name, "set" if e.value is not None and e.name in now else "add"
                                                  if e.value is not None else "remove", now.get(e.name), e.value,
                                                  names.index(e.name) % max(1, len(out[0])) + 1))
                                for e in edits)
        plan.env_changed = any(entries != [dict(e) for e in es.entries] for es, entries in zip(t.envs, out,
                                                                                                 strict=True))
        return out

    async def preview(self, plan: ApplyPlan) -> None:
        """The server-side dry run: the plan's diff becomes the args as the API server would store
        them; a rejection (admission, RBAC, a failed test) is a refusal with kubectl's words."""
        cmd = plan.cmd
        ops = json.loads(cmd.get("patch") or "[]")
        if not ops or any(not r.forceable for r in plan.refusals):
            return
        kind, name = cmd["kind"], cmd["name"]
        rc, out, err = await self._kubectl(K.patch_json(self._backend.ref, kind, name, ops, dry_run=True))
        if rc != 0:
            plan.refusals.append(Refusal(f"the API server refused the patch (server-side dry run): "
                                         f"{_first_line(err) or f'exit {rc}'}", False))
            return
        plan.diff = args_diff(kind, name, json.loads(cmd["before"]), json.loads(out), self._backend.ref.container)

    # -- writing -------------------------------------------------------------------------------

    async def write(self, run: Run, saved: str) -> None:
        plan, say = run.plan, run.say
        cmd = plan.cmd
        kind, name = cmd["kind"], cmd["name"]
        container = self._backend.ref.container
        obj = await self._get(kind, name)
        current = site_values(obj, container)
        current_env = env_values(obj, container)
        if (json.loads(json.dumps(current)) != json.loads(cmd["read"])
                or json.loads(json.dumps(current_env)) != json.loads(cmd.get("read_env") or "[]")):
            raise ServiceError(f"{plan.source.path}: its args or env changed since they were read; nothing was written "
                               "(run the command again to plan on what it says now)", EXIT_REFUSED)
        doc: Backup = {
            "object": f"{kind}/{name}", "context": self._backend.ref.context,
            "namespace": self._backend.ref.namespace, "container": container, "saved_at": run.clock(),
            "text": plan.source.text,
            "sites": [{"path": p, "command": list(c), "args": list(a), "env": e}
                      for (p, c, a), (_ep, e) in zip(current, current_env, strict=True)],
        }
        path = backup_file(saved)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with path.open("x") as fh:  # a backup never overwrites another
                json.dump(doc, fh, indent=1)
        except OSError as exc:
            raise ServiceError(f"cannot save the current args to {path}: {exc}; nothing was written",
                               EXIT_INPUT) from exc
        say(f"{plan.source.path}: current args and env saved as {saved}")
        if plan.restart:  # the boot follower comes after the patch: it follows the container after this one
            await self._mark_next_boot(run.clock())
        rc, out, err = await self._kubectl(K.patch_json(self._backend.ref, kind, name, json.loads(cmd["patch"]),
                                                        dry_run=False))
        if rc != 0:
            code = EXIT_REFUSED if "test" in err.lower() else EXIT_INPUT
            raise ServiceError(f"kubectl patch {kind.lower()}/{name}: {_first_line(err) or f'exit {rc}'}; "
                               "nothing was changed", code)
        after = json.loads(out)
        stored = [[list(c), list(a)] for _, c, a in site_values(after, container)]
        stored_env = [e for _p, e in env_values(after, container)]
        if stored != json.loads(cmd["expected"]) or ("expected_env" in cmd and stored_env != json.loads(
                cmd["expected_env"])):
            await self.restore(run, saved, "the API server stored other args or env than the patch said")
            raise ServiceError(f"{plan.source.path}: the API server stored other args or env than the patch said; the "
                               "previous args and env were patched back", EXIT_INPUT)
        what = "args and env" if plan.env_changed and plan.new_text != plan.source.text else \
            "env" if plan.env_changed else "args"
        say(f"{kind}/{name}: patched; the API server stored the new {what} (the controller rolls the pod out)")

    async def restore(self, run: Run, saved: str, why: str) -> None:
        cmd = run.plan.cmd
        kind, name = cmd["kind"], cmd["name"]
        rc, _out, err = await self._kubectl(K.patch_json(self._backend.ref, kind, name, json.loads(cmd["undo"]),
                                                         dry_run=False))
        if rc != 0:
            raise ServiceError(f"{why}; patching the previous args back failed too ({_first_line(err)}): they are "
                               f"saved in {backup_file(saved)}", EXIT_INPUT)
        run.say(f"{kind}/{name}: the previous args are back ({why})")

    # -- restarting ----------------------------------------------------------------------------

    async def _mark_next_boot(self, at: float) -> None:
        """The container running right now (read again) is the old boot's: the next boot is the one
        after it (``KubeBackend.mark_next_boot``)."""
        with contextlib.suppress(BackendError):
            await self._backend.refresh()
        self._backend.mark_next_boot(at)

    def restart_unavailable(self, name: str, host: HostConfig) -> str | None:
        return None

    def restart_plan(self, plan: RestartPlan) -> None:
        # a plain restart has not located the controller: it is found when the restart runs
        plan.how = "commands"
        plan.steps = [PlanStep("kubectl rollout restart of the pod's controller (a new pod, same template)"),
                      PlanStep("follow the rollout and the new pod's boot")]
        plan.cmd = {"rollout_restart": "1"}

    def restart_how(self, cmd: Mapping[str, str]) -> RestartHow:
        return "commands"

    async def issue_restart(self, call: RestartCall) -> None:
        kind, name = call.cmd.get("kind"), call.cmd.get("name")
        if not kind or not name:
            kind, name, _obj, _via = await self._owner()
        ref = self._backend.ref
        if call.cmd.get("rollout_restart"):
            await self._mark_next_boot(call.clock())
            rc, _out, err = await self._kubectl(K.rollout_restart(ref, kind, name))
            if rc != 0:
                raise ServiceError(f"kubectl rollout restart {kind.lower()}/{name}: "
                                   f"{_first_line(err) or f'exit {rc}'}", EXIT_INPUT)
            call.say(f"{kind}/{name}: rollout restarted")
        argv = K.rollout_status(ref, kind, name, timeout_s=int(call.timeout or ROLLOUT_FALLBACK_S))
        call.say(f"following the rollout: {shlex.join(argv)}")
        self._rollout = asyncio.create_task(self._follow_rollout(argv, call), name="kvtui-kube-rollout")

    async def _follow_rollout(self, argv: list[str], call: RestartCall) -> None:
        """``rollout status`` in the background while the boot follower reads the new pod's log
        (a crash-looping pod never completes the rollout: the log says why first); says how the
        rollout ended, and keeps it for ``rollout_settled``."""
        self._rollout_problem = None
        try:
            rc, out, err = await self._kubectl(argv)
        except ServiceError as exc:
            self._rollout_problem = str(exc)
            call.say(f"rollout did not complete: {exc}")
            return
        last = _last_line(out) or _first_line(err)
        if rc == 0:
            call.say(f"rollout: {last}")
        else:
            self._rollout_problem = _first_line(err) or last or f"kubectl rollout status exited {rc}"
            call.say(f"rollout did not complete: {last or f'exit {rc}'}")

    async def rollout_settled(self, say: Callable[[str], None]) -> str | None:
        """Ready on a kube host: the new pod's boot ready (its log), *and* the rollout complete
        (``kubectl rollout status``: the new pods Ready by their readiness probe, the old ones
        going), as SSH hosts' ready means the new server up. Waits for the rollout started by the
        restart (its ``--timeout`` bounds it); None when it completed, else kubectl's words."""
        task = self._rollout
        if task is None:
            return None
        if not task.done():
            say("the new boot says ready; waiting for the rollout to complete (kubectl rollout status)")
        await asyncio.wait({task})
        return self._rollout_problem

    async def process_env(self, run: Run) -> list[str]:
        """The new pod runs with the environment edits: its container's env list (what the kubelet
        gave the server process; a ``valueFrom`` counts as set, its value unknown here)."""
        try:
            st = await self._backend.refresh()
        except BackendError as exc:
            return [f"the new pod could not be read to check its env ({exc})"]
        pod = self._backend.pod_object() or {}
        container = self._backend.ref.container
        spec = next((c for c in (pod.get("spec") or {}).get("containers") or []
                     if container is None or c.get("name") == container), None)
        status = pick_container(pod, container)
        if spec is None or status is None:
            return [f"pod {st.name} has no container {container or '(first)'} to check the env of"]
        env = plain_env(spec.get("env") or ())
        env.update({str(e.get("name")): "(valueFrom)" for e in spec.get("env") or () if "valueFrom" in e})
        problems = ev.check_environment(env, run.plan.env_edits, what=f"pod {st.name}'s container {spec.get('name')}")
        if not problems:
            run.say(f"pod {st.name} runs with the env edits: " + ", ".join(str(e) for e in run.plan.env_edits))
        return problems


def args_diff(kind: str, name: str, before: Controller, after: Controller, container: str | None) -> str:
    """A unified diff of every pod template's command / args, before and as the API server
    returned them (YAML, one word a line: an edit shows as the words it changes), one per
    template, each headed with the template's container path."""
    def lines(command: Sequence[str], args: Sequence[str]) -> list[str]:
        out = yaml_list("command", command, 0) if command else []
        return [ln + "\n" for ln in [*out, *yaml_list("args", args, 0)]]

    def env_lines(entries: Sequence[EnvVar]) -> list[str]:
        return [ln + "\n" for ln in yaml_env(entries)] if entries else []

    label = f"{kind.lower()}/{name}"
    now = {p: (c, a) for p, c, a in site_values(before, container)}
    now_env = {p.rsplit("/", 1)[0]: e for p, e in env_values(before, container)}
    then_env = {p.rsplit("/", 1)[0]: e for p, e in env_values(after, container)}
    out: list[str] = []
    for path, command, args in site_values(after, container):
        was = now.get(path, ((), ()))
        where = path.rsplit("/", 1)[0]
        old_env, new_env = now_env.get(where, []), then_env.get(where, [])
        out.extend(difflib.unified_diff(lines(*was) + env_lines(old_env), lines(command, args) + env_lines(new_env),
                                        f"{label} {where} (now)", f"{label} {where} (server-side dry run)", n=3))
    return "".join(out)


def _change(c: EditedEnvEntry) -> fl.EditedLine:
    """An env-list change as the plan lists it (``line``: the entry's place in the list)."""
    return fl.EditedLine(f"env {c.name}", c.action, c.old, c.new, c.entry, "in the container's env list")


def _first_line(text: str) -> str:
    """kubectl's error in one line (not client-go's klog lines before it: ``kubectl_error``)."""
    return kubectl_error(text)


def _last_line(text: str) -> str:
    return next((ln.strip() for ln in reversed(text.splitlines()) if ln.strip()), "")

