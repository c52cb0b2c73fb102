"""Command line (SPEC §14): `serve` (default), `check`, `list`, `--version`."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from .startup import fast_imports
from .stderr import (
    EXIT_DRAIN_SECONDS,
    drain_stderr,
    install_background_stderr,
    keep_standard_fds_open,
    point_at_devnull,
)
from .version import VERSION

if TYPE_CHECKING:
    import argparse

    from .hardening import ScrubResult

EXIT_OK, EXIT_PROBLEMS, EXIT_USAGE = 0, 1, 2
# sysexits.h's EX_IOERR: an output that failed is neither "problems found" (1) nor a usage error (2).
EXIT_OUTPUT = 74


def _parser() -> argparse.ArgumentParser:
    import argparse

    parser = argparse.ArgumentParser(
        prog="skill-mcp",
        description="Serve a directory of Agent Skills over MCP (stdio).",
        epilog=(
            "Roots come from MCP_SKILLS_PATH or SKILLS_DIR (':'-separated; no ~ or $VAR expansion); with neither, "
            "the bundled demo skill is served. Exit status: 0 ok, 1 `check` found problems, 2 usage error, "
            "74 stdout could not be written. "
            "The README lists every variable."
        ),
    )
    parser.add_argument("--version", action="version", version=f"skill-mcp {VERSION}")
    commands = parser.add_subparsers(dest="command")
    serve = commands.add_parser("serve", help="serve the configured skills over stdio (the default)")
    check = commands.add_parser(
        "check",
        help="report every problem a skills tree would draw, for skill authors",
        description="Run discovery as the server would (without MCP_SKILL_RUN) and add the Agent Skills format "
        "findings; one line per problem. Exit status 1 when there is any.",
    )
    check.add_argument("roots", nargs="*", metavar="ROOT", help="a skills root (default: the configured roots)")
    check.add_argument("--json", action="store_true", help="print one JSON document")
    listing = commands.add_parser(
        "list",
        help="show what a deployment serves and what may run",
        description="Build the catalog as the server would (grant applied, interpreters looked up) and show it.",
    )
    listing.add_argument("roots", nargs="*", metavar="ROOT", help="a skills root (default: the configured roots)")
    listing.add_argument("--json", action="store_true", help="print the skill_list object")
    listing.add_argument("--egress", action="store_true", help="print the egress allowlist, one host per line")
    for command in (serve, check, listing):
        command.set_defaults(usage_parser=command)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    keep_standard_fds_open()
    if sys.stdout is None:  # started with fd 1 closed, which is /dev/null by now
        sys.stdout = open(1, "w", encoding="utf-8", errors="backslashreplace", closefd=False)
    install_background_stderr()
    try:
        return _run(sys.argv[1:] if argv is None else list(argv))
    finally:
        drain_stderr(EXIT_DRAIN_SECONDS)


def _run(args: list[str]) -> int:
    if args in ([], ["serve"]):
        return serve()  # every client's spawn: no parser to build (argparse and gettext cost ~2 ms)
    parser = _parser()
    try:
        if roots := _roots_given_to_serve(args):
            import shlex

            skills_dir = shlex.quote(":".join(os.path.abspath(root) for root in roots))
            parser.error(
                f"serve takes no ROOT ({' '.join(roots)}): it serves the roots in SKILLS_DIR, e.g. "
                f"`SKILLS_DIR={skills_dir} skill-mcp`; `check` and `list` take ROOT arguments"
            )
        # argparse stops a "*" positional at the first flag; a root after it (`check a --json b`) is still a root.
        options, extra = parser.parse_known_args(args)
        if extra and (getattr(options, "roots", None) is None or any(arg.startswith("-") for arg in extra)):
            # The subcommand's own usage, which lists the flags it takes.
            getattr(options, "usage_parser", parser).error(f"unrecognized arguments: {' '.join(extra)}")
        if extra:
            options.roots += extra
        if "" in getattr(options, "roots", ()):  # abspath("") is the working directory, which it did not name
            options.usage_parser.error(
                "a ROOT is empty (an unset shell variable?): name a directory, or give no ROOT for the configured roots"
            )
    except SystemExit as exit_:  # --help, --version or a usage error, printed
        return write_stdout("", int(exit_.code or 0) and EXIT_USAGE)
    except OSError as error:  # argparse writing --help or --version (before Python 3.12, which ignores the error)
        return _stdout_failed(error, EXIT_OK)
    if options.command in (None, "serve"):
        return serve()
    from . import authoring

    # A root given as an argument or variable may hold undecodable bytes; they are printed escaped, not a crash.
    sys.stdout.reconfigure(errors="backslashreplace")  # type: ignore[union-attr]
    if options.command == "check":
        report, found_problems = authoring.check(tuple(options.roots), as_json=options.json)
        return write_stdout(report, EXIT_PROBLEMS if found_problems else EXIT_OK)
    listing = authoring.list_deployment(tuple(options.roots), as_json=options.json, egress=options.egress)
    return write_stdout(listing, EXIT_OK)


def write_stdout(text: str, code: int) -> int:
    """`text` (if any) printed on stdout, then `code`; or, when stdout cannot be written, what _stdout_failed says."""
    # The notes and warnings written so far come first: on a terminal both streams share, stderr's writer thread
    # would otherwise put them in the middle of the report's lines.
    drain_stderr(EXIT_DRAIN_SECONDS)
    try:
        if text:
            sys.stdout.write(text + "\n")
        sys.stdout.flush()
    except OSError as error:
        return _stdout_failed(error, code)
    return code


def _stdout_failed(error: OSError, code: int) -> int:
    # Fd 1 becomes /dev/null, so what stdout still buffers is dropped at exit rather than raised again there.
    point_at_devnull(1)
    if isinstance(error, BrokenPipeError):
        return code  # the reader left (`| head`): the rest goes nowhere, as in any pipeline; the code still reports
    from .text import os_error_text

    print(f"skill-mcp: error: could not write to stdout: {os_error_text(error)}", file=sys.stderr)
    return EXIT_OUTPUT


def _roots_given_to_serve(args: list[str]) -> list[str]:
    """Directories a user passed to `serve` (`skill-mcp serve ./skills`, `skill-mcp ./skills`), expecting them served;
    anything else is left to the parser (a typo, `--help`)."""
    if "-h" in args or "--help" in args:
        return []
    if args[0] == "serve":
        given = args[1:]
    elif args[0] not in ("check", "list") and os.path.isdir(args[0]):
        given = args  # `skill-mcp ./a ./b`: every directory, as `serve ./a ./b` names them
    else:
        return []  # a subcommand's roots, or a mistyped subcommand (`chekc ./skills`) the parser reports
    return [arg for arg in given if os.path.isdir(arg)]


def _signals_ending_the_server() -> tuple[signal.Signals, ...]:
    # A signal the parent left ignored stays ignored, by convention: `nohup` for SIGHUP, a shell's background
    # job for SIGINT.
    ending = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
    return tuple(each for each in ending if signal.getsignal(each) is not signal.SIG_IGN)


def _exit_on_signals(signals: tuple[signal.Signals, ...]) -> None:
    for each in signals:
        signal.signal(each, lambda *_: os._exit(EXIT_OK))


def _harden_process() -> tuple[ScrubResult, dict[str, str], bool]:
    """The environ scrub, the non-dumpable flag, orphan adoption and the process settings runs rely on; returns
    the scrub's result, the operator's environment as it was, and whether the process is non-dumpable."""
    from . import hardening

    scrub = hardening.scrub_environ()
    environ = dict(os.environ)  # the operator's: what the server sets for itself below is never a script's
    non_dumpable = hardening.make_non_dumpable()
    # This process starts nothing but scripts: what one leaves running is reparented here, where it is killed.
    hardening.adopt_orphans()
    # An ignored SIGCHLD (inherited through exec) would have the kernel collect every script, and its exit
    # status with it.
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    from .files import keep_read_buffers_on_heap

    keep_read_buffers_on_heap()
    return scrub, environ, non_dumpable


def serve() -> int:
    # Until the stdio loop listens for signals (boot takes ~0.2 s), and again once it has stopped (the log lines
    # still draining to a slow stderr), a signal ends the process at once and cleanly: Python's defaults would
    # leave a traceback (SIGINT) or a signal exit status.
    ending_signals = _signals_ending_the_server()
    _exit_on_signals(ending_signals)
    # What start-up imports lives as long as the process, so it is imported with no collection, then frozen, and
    # its dataclasses' methods compile at first call (startup.py: frozen-gc, deferred-methods); discovery, after
    # it, leaves garbage to collect.
    with fast_imports():
        scrub, environ, non_dumpable = _harden_process()  # first: before any thread exists or the environment is read
        # A pydantic plugin (any installed package's `pydantic` entry point) would see every validated message,
        # file contents and arguments included, which no log of ours may carry; none is loaded, or searched for.
        os.environ["PYDANTIC_DISABLE_PLUGINS"] = "__all__"
        from .startup import import_sdk

        unavailable_levers = import_sdk()

        import anyio

        from .deployment import build_deployment
        from .lifecycle import serve_stdio
        from .logs import configure_logging, get_logger, log_boot, log_ready
        from .reaper import reap_adopted_as_they_die
        from .run_tool import RunService
        from .server import build_server

    deployment, warnings = build_deployment(environ, scrub=scrub, non_dumpable=non_dumpable)
    configure_logging(deployment.config.log_level, deployment.config.log_format)
    log = get_logger()
    log_boot(log, deployment, warnings, scrub, unavailable_levers, as_root=os.geteuid() == 0)
    runs = RunService(deployment)
    server = build_server(deployment, runs.call)

    def on_shutdown(reason: str) -> None:
        killed = runs.kill_active()
        log.info("shutdown", reason=reason, killedRun=killed)

    def on_listening() -> None:
        log_ready(log, deployment)
        reap_adopted_as_they_die()  # as PID 1 too, before any run: an operator's job is collected when it ends

    anyio.run(serve_stdio, server, ending_signals, on_shutdown, runs.note_input_end, on_listening)
    _exit_on_signals(ending_signals)
    drain_stderr(EXIT_DRAIN_SECONDS)  # a signal while the log drains still ends the process at once
    # Python's own exit puts back the default action of each signal it handles before it tears its modules down,
    # where a SIGTERM ended the server, done, with status -15; one it ignores stays ignored.
    for each in ending_signals:
        signal.signal(each, signal.SIG_IGN)
    return EXIT_OK


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
