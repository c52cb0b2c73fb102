"""Structured logging (SPEC §13): one JSON object per line on stderr; stdout is the protocol."""

from __future__ import annotations

import logging
import os
import sys
import threading
import traceback
import warnings
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import structlog

from .text import cut, json_for_people, printable
from .version import VERSION

if TYPE_CHECKING:
    from .config import ConfigWarning
    from .deployment import Deployment
    from .hardening import ScrubResult

_READY_NAMES_SHOWN = 8  # skills the `ready` line names before "…"
CRASH_FRAMES = 12  # the innermost frames a `python.crash` line names
_ROOT_PROBLEM = (
    "the server runs as root, so its scripts do too, and root reads any process's memory and environment whatever "
    "the server's non-dumpable flag; run the server as an unprivileged user (the appliance's fenced start does)"
)


def configure_logging(level: str = "info", fmt: str = "json", stream: Any = None) -> None:
    """`level` is one of config.LOG_LEVELS, `fmt` json or console (config validated both)."""
    stream = stream or sys.stderr
    threshold = logging.getLevelNamesMapping()[level.upper()]
    renderer: Any
    stamp: list[Any] = [structlog.processors.add_log_level, structlog.processors.TimeStamper(fmt="iso", utc=True)]
    if fmt == "console":
        renderer = structlog.dev.ConsoleRenderer(colors=stream.isatty())
        stamp.append(_printable_strings)
    else:
        # Read by machines, but also in terminals (`docker logs`): what would reorder or hide text there is written
        # as its JSON escape, the same string to any parser.
        json_line = structlog.processors.JSONRenderer(ensure_ascii=False)
        renderer = lambda *event: json_for_people(json_line(*event))
    structlog.configure(
        processors=[*stamp, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(threshold),
        logger_factory=structlog.WriteLoggerFactory(file=stream),  # a line and its newline in one write, as the SDK's
        cache_logger_on_first_use=False,
    )
    # The SDK logs through the standard library, from warning (or a higher threshold) up: rendered like ours, so
    # stderr stays one object per line. Its message template is kept without its arguments, and an exception only
    # by its type: either can carry what a call validated (arguments, file contents), which no log may hold.
    sdk_handler = logging.StreamHandler(stream)
    sdk_handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            # Values first: the console's escaping makes a newline text, and a message's further lines one line.
            foreign_pre_chain=[structlog.stdlib.add_logger_name, _without_values, *stamp],
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
            use_get_message=False,
        )
    )
    logging.basicConfig(handlers=[sdk_handler], level=max(logging.WARNING, threshold), force=True)
    # Python's own reports (a warning, an exception in a __del__ or a thread) are written to stderr as raw text, which
    # quotes what raised them (pydantic's serializer warning quotes the value): logged like ours, by kind only.
    warnings.showwarning = _log_warning
    sys.unraisablehook = _log_unraisable
    threading.excepthook = _log_thread_exception
    sys.excepthook = _log_crash


def _log_warning(message: Any, category: type[Warning], filename: str, lineno: int, *_: Any, **__: Any) -> None:
    structlog.get_logger().warning(
        "python.warning", category=category.__name__, where=f"{os.path.basename(filename)}:{lineno}"
    )


def _log_unraisable(report: Any) -> None:
    structlog.get_logger().error("python.unraisable", errorType=report.exc_type.__name__)


def _log_thread_exception(report: Any) -> None:
    if report.exc_type is SystemExit:  # what threading's own hook ignores too
        return
    thread = report.thread.name if report.thread is not None else None
    structlog.get_logger().error("thread.error", thread=thread, errorType=report.exc_type.__name__)


def _log_crash(exc_type: type[BaseException], _: BaseException, trace: Any) -> None:
    # Where it happened, innermost last, by file, line and function: a frame's source line or the exception's text
    # could quote what was being handled. The process then exits 1, as after Python's own report.
    frames = [f"{os.path.basename(frame.filename)}:{frame.lineno} {frame.name}" for frame in traceback.extract_tb(trace)]
    structlog.get_logger().error("python.crash", errorType=exc_type.__name__, where=frames[-CRASH_FRAMES:])


def _printable_strings(logger: Any, method_name: str, event: dict[str, Any]) -> dict[str, Any]:
    # The console format writes strings as they are: a directory named with a terminal escape would be obeyed.
    return {key: printable(value) if isinstance(value, str) else value for key, value in event.items()}


def _without_values(logger: Any, method_name: str, event: dict[str, Any]) -> dict[str, Any]:
    """A library's record as a log line may show it: the first line of its template, an exception by its type."""
    # A template is one line; asyncio prebuilds its message and adds a task's repr, exception text included, below.
    if isinstance(event.get("event"), str):
        event["event"] = event["event"].split("\n", 1)[0]
    exc_info = event.pop("exc_info", None)
    event.pop("stack_info", None)
    if isinstance(exc_info, tuple) and exc_info[0] is not None:
        event["errorType"] = exc_info[0].__name__
    return event


def get_logger() -> Any:
    return structlog.get_logger()


def logged_ids(ids: Iterable[Any]) -> list[Any]:
    """JSON-RPC ids as a log line shows them: a client's string id can be megabytes long, and each line waits in
    stderr's backlog (BACKLOG_LINES of them), so a long one is cut."""
    return [cut(each) if isinstance(each, str) else each for each in ids]


def log_boot(
    log: Any,
    deployment: Deployment,
    warnings: list[ConfigWarning],
    scrub: ScrubResult,
    unavailable_levers: list[str],
    *,
    as_root: bool = False,
) -> None:
    """The start-up events (§13): warnings, `boot`, and one `problem` each. `as_root`: the server's effective uid
    is 0."""
    config = deployment.config
    for warning in warnings:
        log.warning("config.warning", variable=warning.variable, problem=warning.problem)
    # §9.7: each hardening step that failed warns, whether or not it blocks runs.
    if scrub.status == "failed":
        log.warning("hardening.warning", step="environ-scrub", problem=scrub.reason)
    if scrub.status != "unsupported" and not deployment.hardening.non_dumpable:
        problem = "prctl(PR_SET_DUMPABLE, 0) did not hold; a script of this uid could read this server's memory"
        log.warning("hardening.warning", step="non-dumpable", problem=problem)
    if as_root and deployment.run_block is None and _runnable_scripts(deployment):
        log.warning("hardening.warning", step="uid", problem=_ROOT_PROBLEM)
    if deployment.grant.grant_error:
        log.warning("config.warning", variable="MCP_SKILL_RUN", problem=deployment.grant.grant_error)
    for lever in unavailable_levers:
        log.warning("startup.warning", lever=lever, problem="does not apply to the installed SDK; cold start is slower")
    log.info(
        "boot",
        version=VERSION,
        roots=list(deployment.roots),
        rootsFrom=deployment.roots_from,
        grantFrom=deployment.grant.grant_from,
        hosted=config.hosted,
        skills=len(deployment.skills),
        problems=len(deployment.problems),
        interpreters=dict(deployment.interpreters),
        environScrub=scrub.status,
        nonDumpable=deployment.hardening.non_dumpable,
        maxSkills=config.max_skills,
        confirmMode=config.confirm_mode,
        elicitation="on" if config.elicitation else "off",
    )
    for problem in deployment.problems:
        log.warning("problem", path=problem.path, reason=problem.reason, detail=problem.detail)


def log_ready(log: Any, deployment: Deployment) -> None:
    """The line for people, once the server listens for signals and its client (a signal from here on logs
    `shutdown`)."""
    skills = deployment.skills
    names = ", ".join(skill.name for skill in skills[:_READY_NAMES_SHOWN])
    names += ", …" if len(skills) > _READY_NAMES_SHOWN else ""
    log.info(
        "ready",
        message=f"skill-mcp {VERSION} serves {len(skills)} skill(s)"
        + (f" ({names})" if names else "")
        + f" with {len(deployment.problems)} problem(s) and {_what_may_run(deployment)}; waiting for an MCP client "
        "on stdin",
    )


def _what_may_run(deployment: Deployment) -> str:
    """How many scripts may run, or what keeps every script from running."""
    if deployment.run_block is not None:
        return "no script may run (the environ scrub failed; skill_list says why)"
    if deployment.grant.grant_error is not None:
        return "no script may run (MCP_SKILL_RUN is malformed; skill_list's grantError says how)"
    if deployment.grant.grant_from == "hosted-default":
        return "no script may run (hosted, and no MCP_SKILL_RUN grant was supplied)"
    return f"{_runnable_scripts(deployment)} runnable script(s)"


def _runnable_scripts(deployment: Deployment) -> int:
    return sum(deployment.runnable(entry) for entries in deployment.effective.values() for entry in entries)
