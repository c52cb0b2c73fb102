"""`skill_run` (SPEC §9.1): the confirmation gate's three paths, one run at a time.

The pieces live elsewhere (preview.py drafts what would run, confirm.py seals and words, runner.py spawns and bounds,
reaper.py kills what is left); this module orders the checks and talks to the MCP session.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import anyio
import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from . import confirm
from .deployment import Deployment
from .hardening import ChildLimits
from .logs import get_logger
from .preview import Draft, Refused, arg_bytes, build_draft
from .reaper import kill_for_exit, kill_process_group, wait_leader_reaped
from .results import failure_result, minified, text_result
from .runner import RunOutcome, SpawnFailed, build_argv, network_note, run_process, script_environment
from .schemas import schema_violation
from .spent import SpentStoreError
from .text import cut, json_for_people, quoted_path

LEADER_WAIT_SECONDS = 2.0  # at most, for a cancelled run's killed leader to be collected
OUT_OF_RESOURCES_HINT = (
    "The server ran out of open files, processes or memory: limits of its deployment (ulimit -n and -u, a "
    "container's --pids-limit or memory limit), not of the skill. Call again once other work has ended, or ask the "
    "operator to raise them."
)
_SPEND_FAILED_HINT = (
    "MCP_DATA_DIR must be an existing directory the server's user can write, and any .mcp-confirm store in it "
    "that user's own: the spent-token store is kept there."
)


@dataclass
class _ActiveRun:
    """A started script: enough for whoever stops it first (its call's cancellation, or a signal's shutdown, which
    exits before that call can) to log its `run.end`."""

    draft: Draft
    pid: int
    env_names: list[str]
    started_at: float  # time.monotonic() before the spawn
    end_logged: bool = False


class RunService:
    def __init__(
        self,
        deployment: Deployment,
        *,
        clock_ms: Callable[[], int] | None = None,
        random_bytes: Callable[[int], bytes] = os.urandom,
    ) -> None:
        self.deployment = deployment
        config = deployment.config
        secrets = (config.confirm_secret, config.host_confirm_secret, config.data_dir)
        self._key = confirm.confirm_key(*secrets, random_bytes)
        self._spent = confirm.make_spent_store(*secrets)
        self._clock_ms = clock_ms or (lambda: int(time.time() * 1000))
        self._random_bytes = random_bytes
        self._busy = False
        self._active: _ActiveRun | None = None
        self._end_claim = threading.Lock()  # a shutdown on the watchdog's thread may race the run's own end
        self._running_at_input_end = False
        self._collecting: anyio.Event | None = None  # set while a stopped run's leader is being collected
        self._input_ended = False
        self._questions: set[anyio.CancelScope] = set()  # confirmation questions awaiting the user (path 1)
        self._log = get_logger()

    # --- entry points -------------------------------------------------------------------------

    async def call(self, ctx: ServerRequestContext[Any], arguments: Any) -> dict[str, Any] | types.InputRequiredResult:
        """`arguments` as the client sent them (any JSON value); every step of §9.1 is ordered here."""
        if (violation := schema_violation("skill_run", arguments)) is not None:
            fields = arguments if isinstance(arguments, dict) else {}
            self._log_refused(fields.get("name"), fields.get("script"), "bad-arguments")
            return text_result(violation, is_error=True)
        name, script = arguments["name"], arguments["script"]
        try:
            draft = build_draft(self.deployment, name, script, tuple(arguments.get("args", ())))
        except Refused as refused:
            return self._refused(name, script, refused)
        confirm_path = self._confirm_path(ctx)
        self._log_preview(draft, confirm_path)
        token = arguments.get("confirmToken")
        could_run = confirm_path != "token" or (token is not None and self._confirm_mode() != "refuse")
        if could_run and self._busy and not await self._freed_by_a_stopped_run():
            return self._busy_refusal(draft)
        if confirm_path == "elicitation":
            return await self._path_elicitation(ctx, draft)
        if confirm_path == "input-required":
            return await self._path_input_required(ctx, draft)
        return await self._path_token(draft, token)

    def note_input_end(self) -> None:
        """The client closed stdin: a running script is killed now (§5.1) and none starts from here on, while
        the server answers what it read before; the run's call logs its end, and `kill_active` at shutdown
        reports this run."""
        self._input_ended = True
        self._running_at_input_end = self._active is not None
        for question in self._questions:  # no answer can reach them now: each call is answered "not confirmed"
            question.cancel()
        if self._active is not None:
            kill_process_group(self._active.pid)

    def kill_active(self) -> bool:
        """On shutdown: kill a running script's group and log its end, since a signal's shutdown exits before the
        call can; True when a run was in flight."""
        active = self._active
        if active is None:
            return self._running_at_input_end
        kill_for_exit(active.pid)
        self._log_stopped_end(active)
        return True

    # --- the gate (§11) ---------------------------------------------------------------------------

    def _confirm_mode(self) -> str:
        return self.deployment.config.confirm_mode

    def _confirm_path(self, ctx: ServerRequestContext[Any]) -> confirm.ConfirmPath:
        capabilities = ctx.session.client_capabilities
        declared = capabilities.model_dump(by_alias=True, exclude_none=True) if capabilities else None
        return confirm.choose_path(
            ctx.protocol_version in MODERN_PROTOCOL_VERSIONS,
            confirm.declares_form_elicitation(declared),
            self.deployment.config.elicitation,
        )

    async def _path_elicitation(
        self, ctx: ServerRequestContext[Any], draft: Draft
    ) -> dict[str, Any] | types.InputRequiredResult:
        decision = await self._user_decision(ctx, draft)
        self._log_confirm(draft, "elicitation", decision)
        if decision != "accepted":
            return text_result(minified(confirm.not_confirmed()))
        try:
            fresh = build_draft(self.deployment, draft.skill.name, draft.entry.script, draft.args)
        except Refused as refused:  # the skill changed while the user was deciding
            return self._refused(draft.skill.name, draft.entry.script, refused)
        if fresh.will_run != draft.will_run:  # the user's "accepted" is logged; so is why it approves nothing
            self._log_confirm(draft, "elicitation", confirm.DRAFT_CHANGED)
            return text_result(_preview_json(confirm.draft_changed(fresh.will_run)), is_error=True)
        return await self._spend_and_run(fresh, None, "elicitation")

    async def _user_decision(self, ctx: ServerRequestContext[Any], draft: Draft) -> str:
        """The user's answer to the confirmation question: accepted, declined, cancelled or failed."""
        if self._input_ended:  # the client has closed its input: no answer could come
            return "cancelled"
        message, schema = confirm.elicitation_question(draft.will_run)
        with anyio.CancelScope() as question:
            self._questions.add(question)
            try:
                with anyio.fail_after(self.deployment.config.ttl_seconds):
                    return _decision(await ctx.session.elicit_form(message, schema, related_request_id=ctx.request_id))
            except anyio.get_cancelled_exc_class():
                if not question.cancel_called:  # the client gave up on the call while its user decided
                    self._log_confirm(draft, "elicitation", "cancelled")
                raise
            except Exception:  # noqa: BLE001 - a client error or a timeout means "not confirmed"
                return "failed"
            finally:
                self._questions.discard(question)
        return "cancelled"  # the client closed its input while its user decided (note_input_end)

    async def _path_input_required(
        self, ctx: ServerRequestContext[Any], draft: Draft
    ) -> dict[str, Any] | types.InputRequiredResult:
        params = ctx.params or {}
        responses = params.get("inputResponses") or {}
        if not responses:
            self._log_confirm(draft, "input-required", "asked")
            return self._ask(draft)
        decision = _decision(responses.get("confirm"))
        if decision != "accepted":
            self._log_confirm(draft, "input-required", decision)
            return text_result(minified(confirm.not_confirmed()))
        state = params.get("requestState")
        if not isinstance(state, str):
            self._log_confirm(draft, "input-required", "failed")
            return text_result(
                "the confirmation answer arrived without the request state this server issued; nothing was run",
                is_error=True,
            )
        approval = confirm.open_state(
            self._key, state, draft.target, confirm.payload_hash(draft.will_run), self._clock_ms(), self._spent
        )
        # An answer bound to no valid state approves nothing: ask again.
        self._log_confirm(draft, "input-required", "accepted" if approval else "asked")
        if approval is None:
            return self._ask(draft)
        return await self._spend_and_run(draft, approval, "input-required")

    def _ask(self, draft: Draft) -> types.InputRequiredResult:
        message, schema = confirm.elicitation_question(draft.will_run)
        state, _ = confirm.seal_state(
            self._key, draft.target, confirm.payload_hash(draft.will_run), self._clock_ms(),
            self.deployment.config.ttl_seconds, self._random_bytes(confirm.NONCE_BYTES),
        )
        request = {"method": "elicitation/create", "params": {"mode": "form", "message": message, "requestedSchema": schema}}
        return types.InputRequiredResult.model_validate(
            {"resultType": "input_required", "inputRequests": {"confirm": request}, "requestState": state}
        )

    async def _path_token(self, draft: Draft, token: str | None) -> dict[str, Any] | types.InputRequiredResult:
        mode = self._confirm_mode()
        if mode == "refuse":
            self._log_confirm(draft, "token", "confirmation-unsupported")
            return text_result(minified(confirm.confirmation_unsupported(self._unsupported_cause())))
        payload = confirm.payload_hash(draft.will_run)
        if token is None:
            self._log_confirm(draft, "token", "asked")
            required = confirm.confirmation_required(draft.will_run, **self._offer(draft, payload))
            return text_result(_preview_json(required))
        verdict = confirm.verify_token(self._key, token, draft.target, payload, self._clock_ms(), self._spent)
        self._log_confirm(draft, "token", "ok" if verdict.ok else verdict.error)
        if verdict.error == confirm.DRAFT_CHANGED:
            offer = confirm.token_offer(**self._offer(draft, payload))
            return text_result(_preview_json(confirm.draft_changed(draft.will_run, offer)), is_error=True)
        if not verdict.ok:
            return text_result(minified(confirm.rejection(verdict.error)), is_error=True)
        return await self._spend_and_run(draft, verdict.approval, "token")

    def _offer(self, draft: Draft, payload: str) -> dict[str, Any]:
        ttl = self.deployment.config.ttl_seconds
        token, expires_ms = confirm.issue_token(
            self._key, draft.target, payload, self._clock_ms(), ttl, self._random_bytes(confirm.NONCE_BYTES)
        )
        return {"token": token, "expires_ms": expires_ms, "ttl_s": ttl, "mode": self._confirm_mode()}

    def _unsupported_cause(self) -> str:
        config = self.deployment.config
        if config.confirm_mode_reason is not None:  # "ttl-invalid" or "mode-unknown"
            return config.confirm_mode_reason
        return "elicitation-off" if not config.elicitation else "no-elicitation"

    # --- running (§9.1 steps 10-11) ---------------------------------------------------------------

    def _refused(self, name: str, script: str, refused: Refused) -> dict[str, Any]:
        self._log_refused(name, script, refused.reason)
        return failure_result(refused)

    def _log_refused(self, skill: object, script: object, reason: str) -> None:
        # The caller chose these strings: a megabyte name is cut, a non-string one is not shown.
        shown = [cut(value) if isinstance(value, str) else None for value in (skill, script)]
        self._log.warning("run.refused", skill=shown[0], script=shown[1], reason=reason)

    async def _freed_by_a_stopped_run(self) -> bool:
        """True when the lock was held only while a stopped run's leader was collected (milliseconds, at most
        LEADER_WAIT_SECONDS), and is free now: a client that cancels and calls again is not refused for it."""
        collecting = self._collecting
        if collecting is None:
            return False
        await collecting.wait()
        return not self._busy

    def _busy_refusal(self, draft: Draft) -> dict[str, Any]:
        message = "another skill script is already in flight on this server; nothing was run"
        busy = Refused("busy", message, "Wait for it to finish and call again: one script runs at a time.")
        return self._refused(draft.skill.name, draft.entry.script, busy)

    async def _spend_and_run(
        self, draft: Draft, approval: confirm.Approval | None, confirm_path: str
    ) -> dict[str, Any] | types.InputRequiredResult:
        """Take the one-run slot, spend the approval (None on the elicitation path: nothing to spend), run, free it."""
        if self._busy and not await self._freed_by_a_stopped_run():
            return self._busy_refusal(draft)
        # From here to `self._busy = True`, a check-and-set with no await in between.
        if self._input_ended:  # the end of input stops runs (§5.1); this one has not begun
            message = "the client closed its input before this run could start; nothing was run"
            refusal = Refused("input-ended", message, "Keep the session open until the answer arrives.")
            return self._refused(draft.skill.name, draft.entry.script, refusal)
        self._busy = True
        try:
            if approval is not None:
                try:
                    spent_now = self._spent.spend(approval.nonce, approval.expires_ms, self._clock_ms())
                except SpentStoreError as error:
                    message = f"the approval could not be recorded as spent ({error}); nothing was run"
                    refusal = Refused("spend-failed", message, _SPEND_FAILED_HINT)
                    return self._refused(draft.skill.name, draft.entry.script, refusal)
                if not spent_now:  # spent by another server sharing the store since this one checked
                    if confirm_path == "input-required":  # a spent state is asked again (§11.3 step 5)
                        self._log_confirm(draft, confirm_path, "asked")
                        return self._ask(draft)
                    self._log_confirm(draft, confirm_path, confirm.TOKEN_REUSED)
                    return text_result(minified(confirm.rejection(confirm.TOKEN_REUSED)), is_error=True)
            return await self._execute(draft)
        finally:
            active = self._active
            if active is not None:  # cancelled, or failed unexpectedly: nothing was captured
                self._log_stopped_end(active)
                # Its killed leader may still be dying; the next run starts once it is gone, or that leader's exit
                # would sweep the next run's processes as left behind.
                self._collecting = anyio.Event()
                with anyio.move_on_after(LEADER_WAIT_SECONDS, shield=True):
                    await wait_leader_reaped(active.pid)
            self._busy = False
            self._active = None
            if self._collecting is not None:
                self._collecting.set()
                self._collecting = None

    async def _execute(self, draft: Draft) -> dict[str, Any]:
        deployment, entry = self.deployment, draft.entry
        env = script_environment(deployment.environ, entry.env)
        argv = build_argv(entry.interpreter, deployment.interpreters[entry.interpreter], draft.real_script, draft.args)
        config = deployment.config
        limits = ChildLimits(config.rlimit_nproc, config.rlimit_as_mb)
        timeout_ms = draft.will_run["timeoutMs"]
        env_names = sorted(env)  # what is handed, by construction; equal to the preview's envNames (same environ)
        started_at = time.monotonic()

        def started(pid: int) -> None:
            self._active = _ActiveRun(draft, pid, env_names, started_at)
            self._log.info(
                "run.start", skill=draft.skill.name, script=entry.script, interpreter=entry.interpreter, pid=pid,
                timeoutMs=timeout_ms, argc=len(draft.args), argvSha256=draft.argv_sha256, envNames=env_names,
            )

        try:
            outcome = await run_process(argv, draft.skill.real_dir, env, timeout_ms, limits, on_start=started)
        except SpawnFailed as failed:
            hint = OUT_OF_RESOURCES_HINT if failed.out_of_resources else (
                f"This deployment runs: {deployment.runnable_interpreters()}; the script must be a regular file "
                "inside the skill."
            )
            refusal = Refused("spawn-failed", f"could not start {quoted_path(entry.script)}: {failed}", hint)
            return self._refused(draft.skill.name, entry.script, refusal)
        result = self._result(draft, outcome, env_names)
        if self._active is not None and not self._claim_end(self._active):
            return text_result(minified(result))  # a shutdown logged this run's end as it killed it
        self._log_end(
            draft, env_names, exit_code=outcome.exit_code, signal=outcome.signal, timed_out=outcome.timed_out,
            duration_ms=outcome.duration_ms, truncated=result["truncated"], stdout_bytes=outcome.stdout_bytes,
            stderr_bytes=outcome.stderr_bytes, cancelled=self._running_at_input_end,  # the client left mid-run
        )
        return text_result(minified(result))

    def _result(self, draft: Draft, outcome: RunOutcome, env_names: list[str]) -> dict[str, Any]:
        config = self.deployment.config
        result: dict[str, Any] = {
            "skill": draft.skill.name,
            "script": draft.entry.script,
            "interpreter": draft.entry.interpreter,
            "exitCode": outcome.exit_code,
            "signal": outcome.signal,
            "stdout": outcome.stdout,
            "stderr": outcome.stderr,
            "truncated": {"stdout": outcome.truncated_stdout, "stderr": outcome.truncated_stderr},
            "timedOut": outcome.timed_out,
            "timeoutMs": draft.will_run["timeoutMs"],
            "durationMs": outcome.duration_ms,
            "env": env_names,
        }
        note = network_note(outcome, config.egress_fenced, config.proxy_set)
        if note is not None:
            result["networkNote"] = note
        return result

    # --- logs -----------------------------------------------------------------------------------

    def _claim_end(self, active: _ActiveRun) -> bool:
        """True for the first caller only: each run logs one `run.end`."""
        with self._end_claim:
            claimed, active.end_logged = not active.end_logged, True
        return claimed

    def _log_stopped_end(self, active: _ActiveRun) -> None:
        """`run.end` for a run killed before it settled, so nothing was captured; once, whoever stopped it."""
        if not self._claim_end(active):
            return
        self._log_end(
            active.draft, active.env_names, exit_code=None, signal="SIGKILL", timed_out=False,
            duration_ms=int((time.monotonic() - active.started_at) * 1000), truncated=None, stdout_bytes=None,
            stderr_bytes=None, cancelled=True,
        )

    def _log_end(
        self, draft: Draft, env_names: list[str], *, exit_code: int | None, signal: str | None, timed_out: bool,
        duration_ms: int, truncated: dict[str, bool] | None, stdout_bytes: int | None, stderr_bytes: int | None,
        cancelled: bool = False,
    ) -> None:
        # One field list for a settled run and a stopped one, so the two `run.end` shapes cannot drift apart.
        self._log.info(
            "run.end", skill=draft.skill.name, script=draft.entry.script, exitCode=exit_code, signal=signal,
            timedOut=timed_out, durationMs=duration_ms, truncated=truncated, stdoutBytes=stdout_bytes,
            stderrBytes=stderr_bytes, env=env_names, **({"cancelled": True} if cancelled else {}),
        )

    def _logged_path(self, confirm_path: str) -> str:
        # In refuse mode the token path is where every run stops; the logs name it so (§13).
        return "refused" if confirm_path == "token" and self._confirm_mode() == "refuse" else confirm_path

    def _log_preview(self, draft: Draft, confirm_path: str) -> None:
        self._log.info(
            "run.preview", skill=draft.skill.name, script=draft.entry.script, interpreter=draft.entry.interpreter,
            argc=len(draft.args), argBytes=arg_bytes(draft.args), argvSha256=draft.argv_sha256,
            envNames=draft.will_run["envNames"], confirmPath=self._logged_path(confirm_path),
        )

    def _log_confirm(self, draft: Draft, confirm_path: str, decision: str | None) -> None:
        self._log.info(
            "run.confirm", skill=draft.skill.name, script=draft.entry.script,
            confirmPath=self._logged_path(confirm_path), decision=decision,
        )


def _decision(answer: Any) -> str:
    """An elicit result (model or wire dict) → accepted / declined / cancelled / failed."""
    if answer is None:
        return "failed"
    if hasattr(answer, "model_dump"):
        answer = answer.model_dump(by_alias=True, exclude_none=True)
    if not isinstance(answer, dict):
        return "failed"
    action = answer.get("action")
    if action == "accept":
        content = answer.get("content") or {}
        if not isinstance(content, dict):
            return "failed"  # no form's fields: a sampling result's content, say, answered the question
        return "accepted" if content.get("confirmed") is True else "declined"
    return {"decline": "declined", "cancel": "cancelled"}.get(action, "failed")


def _preview_json(value: dict[str, Any]) -> str:
    """A result carrying a preview, which the user is shown to approve: written so nothing in it reorders."""
    return json_for_people(minified(value))
