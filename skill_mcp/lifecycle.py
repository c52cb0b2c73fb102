"""Serving over stdio until the client leaves (SPEC §5.1): signals, the end of input, the requests read before
it answered, and an exit within 5 s whatever the client does with its end of the pipes."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections import Counter, deque
from collections.abc import Callable, Iterable
from typing import Any

import anyio
import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.shared.dispatcher import as_request_id, coerce_request_id
from mcp.shared.message import SessionMessage
from mcp_types import RequestId

from .logs import get_logger, logged_ids
from .stderr import drain_stderr
from .transport import reports_hangup, stdio_transport
from .unreadable import Unreadable, lost_request_id, unreadable_message

ANSWER_DRAIN_SECONDS = 2.0  # answering what was read before stdin ended; §5.1 allows 5 s from there to the exit
# The forced exit: 4.5 s, plus SHUTDOWN_WAIT_SECONDS for a shutdown under way (its run kill and log line) and
# STDERR_DRAIN_SECONDS, is 4.9 s after the client left: inside §5.1's 5 s.
EXIT_DEADLINE_SECONDS = 4.5
SHUTDOWN_WAIT_SECONDS = 0.3  # the watchdog's wait for a shutdown under way
IDS_LOGGED = 16  # of a batch's request ids, in its `message.unreadable` line
# Requests read and not yet answered, beyond which no more is read while answers wait to be written: each holds
# its answer until then, and a client that stops reading stdout would otherwise have every line it sent make one
# (a 4 MiB read, say). While answers flow, slow requests do not stop a ping or a cancellation being read.
MAX_REQUESTS_IN_FLIGHT = 16
STDERR_DRAIN_SECONDS = 0.1  # for the log lines not yet written, shutdown's among them, when exiting at once


async def serve_stdio(
    server: Server[Any],
    ending_signals: Iterable[signal.Signals],
    on_shutdown: Callable[[str], None],
    on_input_end: Callable[[], None],
    on_listening: Callable[[], None],
) -> None:
    """Serve until stdin closes, the client leaves or one of `ending_signals` arrives, then shut down with exit
    status 0 within §5.1's 5 s. `on_listening` runs once signals are handled here; `on_input_end` runs when the
    last message has been read, before the requests read are answered (_Unanswered) and the SDK cancels the calls
    still in flight; `on_shutdown(reason)` runs once, at the end."""
    shutdown = _Shutdown(on_shutdown)
    deadline = _ExitDeadline(shutdown)

    def input_ended() -> None:
        on_input_end()
        deadline.arm()

    async with anyio.create_task_group() as group:

        async def watch_signals(*, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
            try:
                with anyio.open_signal_receiver(*ending_signals) as signals:
                    task_status.started()
                    async for _ in signals:
                        deadline.exit_now("signal")  # stdin is read by a thread blocked in read(): exit, not cancel
            finally:
                # Closing the receiver restores each signal's default action, which would end the server winding
                # down with the signal's status (-15), not 0.
                for each in ending_signals:
                    signal.signal(each, lambda *_: deadline.exit_now("signal"))

        await group.start(watch_signals)
        on_listening()
        try:
            hangs_up = reports_hangup(0)  # read before the transport puts /dev/null there
            async with stdio_transport(on_hangup=deadline.arm) as (read_stream, write_stream):
                unanswered = _Unanswered(may_pause=hangs_up)
                answers = _WatchedOutput(write_stream, unanswered)
                refusals = _Refusals(answers, unanswered, group)
                messages = _WatchedInput(read_stream, unanswered, input_ended, refusals)
                await server.run(messages, answers, server.create_initialization_options())  # type: ignore[arg-type]
        except* BrokenPipeError:
            pass  # the client closed its end of stdout: it has left, as if it had closed stdin
        group.cancel_scope.cancel()
    shutdown("eof")


class _ExitDeadline:
    """The exit within §5.1's 5 s. Answers are written by a thread that no cancellation reaches, so a client that
    stopped reading would hold the exit forever: `arm` forces it EXIT_DEADLINE_SECONDS later, counted from the
    client's close where its stdin reports it (reports_hangup), else from the end of input read."""

    def __init__(self, shutdown: _Shutdown) -> None:
        self._shutdown = shutdown
        self._armed = threading.Lock()  # armed once, from the loop or the transport's hangup watcher

    def exit_now(self, reason: str) -> None:
        self._shutdown(reason)
        sys.stdout.flush()
        drain_stderr(STDERR_DRAIN_SECONDS)
        os._exit(0)

    def arm(self) -> None:
        if self._armed.acquire(blocking=False):
            watchdog = threading.Timer(EXIT_DEADLINE_SECONDS, self.exit_now, ("eof",))
            watchdog.daemon = True
            watchdog.start()


class _Shutdown:
    """Runs `on_shutdown` once, for whichever thread comes first. A later caller (the exit watchdog, which exits
    next) waits a moment for one under way on another thread, so its kill and its log line are not cut off."""

    def __init__(self, on_shutdown: Callable[[str], None]) -> None:
        self._on_shutdown = on_shutdown
        self._once = threading.Lock()
        self._done = threading.Event()

    def __call__(self, reason: str) -> None:
        if not self._once.acquire(blocking=False):
            self._done.wait(SHUTDOWN_WAIT_SECONDS)
            return
        try:
            self._on_shutdown(reason)
        finally:
            self._done.set()


class _Unanswered:
    """Answers owed for what was read from stdin and not written yet: the requests, and the refusals of lines the
    SDK could not read. While the writer is behind, reading pauses at MAX_REQUESTS_IN_FLIGHT of them. When stdin
    ends the SDK cancels every request in flight, so a client that writes its requests and closes stdin (a shell
    pipe) would lose their answers: the end of input waits for these, at most ANSWER_DRAIN_SECONDS. A skill_run
    call ends soon too: the end of input kills its script and withdraws its question to the user."""

    def __init__(self, may_pause: bool = True) -> None:
        self._may_pause = may_pause  # only where the client's close is seen unread: the exit deadline needs it
        self._waiting: Counter[RequestId] = Counter()  # by the SDK's own id rules: "7" is 7, true is no id
        self._in_writer: Counter[RequestId] = Counter()  # answers handed to the writer and not yet taken
        self._room: anyio.Event | None = None  # only while reading waits for an answer to be written
        self._all_answered: anyio.Event | None = None  # only while draining

    def note_read(self, item: Any) -> None:
        message = getattr(item, "message", None)
        if isinstance(message, types.JSONRPCRequest):
            request_id = coerce_request_id(message.id)
            self._waiting[request_id] += 1
        elif isinstance(message, types.JSONRPCNotification) and message.method == "notifications/cancelled":
            cancelled = as_request_id((message.params or {}).get("requestId"))
            # The SDK writes nothing for a request cancelled in time; an answer already with the writer still goes.
            if cancelled is not None and coerce_request_id(cancelled) not in self._in_writer:
                self._settle(coerce_request_id(cancelled))

    def note_owed(self, request_ids: Iterable[RequestId]) -> None:
        """Answers the server writes of its own accord (refusals of unreadable lines), counted like requests."""
        self._waiting.update(coerce_request_id(request_id) for request_id in request_ids)

    def send_started(self, answer_id: RequestId | None) -> None:
        """A message handed to the writer (an answer to `answer_id`, or None): until taken, the writer is behind."""
        self._in_writer[answer_id] += 1

    def send_taken(self, answer_id: RequestId | None) -> None:
        _take_one(self._in_writer, answer_id)
        self._make_room()

    def note_written(self, answer_id: RequestId) -> None:
        self._settle(answer_id)

    def _settle(self, request_id: RequestId) -> None:
        _take_one(self._waiting, request_id)
        self._make_room()
        if self._all_answered is not None and not self._waiting:
            self._all_answered.set()

    def _full(self) -> bool:
        writer_behind = self._in_writer.total() > 0
        return self._may_pause and writer_behind and self._waiting.total() >= MAX_REQUESTS_IN_FLIGHT

    def _make_room(self) -> None:
        if self._room is not None and not self._full():
            self._room.set()
            self._room = None

    async def wait_for_room(self) -> None:
        """Returns at once unless MAX_REQUESTS_IN_FLIGHT requests wait for their answer while answers wait to be
        written; then once either is no longer so."""
        while self._full():
            if self._room is None:
                self._room = anyio.Event()
            await self._room.wait()

    async def drain(self) -> None:
        if not self._waiting:
            return
        self._all_answered = anyio.Event()
        with anyio.move_on_after(ANSWER_DRAIN_SECONDS):
            await self._all_answered.wait()


def _answer_id(item: Any) -> RequestId | None:
    """The request id an answer (a response or an error) carries, by the SDK's rules; None for anything else."""
    message = getattr(item, "message", None)
    if isinstance(message, (types.JSONRPCResponse, types.JSONRPCError)) and message.id is not None:
        return coerce_request_id(message.id)
    return None


def _take_one(counter: Counter[Any], key: Any) -> None:
    if counter[key] > 1:
        counter[key] -= 1
    else:
        counter.pop(key, None)


class _Watched:
    """One of the SDK's streams, unchanged but for what a subclass notes in `_unanswered` as messages pass."""

    def __init__(self, stream: Any, unanswered: _Unanswered) -> None:
        self._stream, self._unanswered = stream, unanswered

    async def __aenter__(self) -> Any:
        await self._stream.__aenter__()
        return self

    async def __aexit__(self, *exc_info: Any) -> Any:
        return await self._stream.__aexit__(*exc_info)

    def __getattr__(self, name: str) -> Any:  # e.g. `last_context`, read per message
        return getattr(self._stream, name)


class _WatchedInput(_Watched):
    """Notes each request read; at the end of input, runs the callback and then the drain. A line the SDK could
    not read as a message, which it would drop unanswered, is logged, and answered when it names a request id."""

    def __init__(self, stream: Any, unanswered: _Unanswered, on_end: Callable[[], None], refusals: _Refusals) -> None:
        super().__init__(stream, unanswered)
        self._on_end, self._refusals = on_end, refusals
        self._failed_answers: deque[SessionMessage] = deque()

    def __aiter__(self) -> _WatchedInput:
        return self

    async def __anext__(self) -> Any:
        while True:
            if self._failed_answers:
                return self._failed_answers.popleft()
            await self._unanswered.wait_for_room()
            try:
                item = await self._stream.__anext__()
            except StopAsyncIteration:
                self._on_end()
                await self._unanswered.drain()
                raise
            if not isinstance(item, Exception):
                self._unanswered.note_read(item)
                self._refusals.note_lost_id(item)
                return item
            unreadable = self._refusals.refuse(item)
            if unreadable.answers_to:  # answers to requests of ours: each of those requests fails with it
                error = types.ErrorData(code=unreadable.error.code, message=f"the client's answer: {unreadable.error.message}")
                self._failed_answers.extend(
                    SessionMessage(types.JSONRPCError(jsonrpc="2.0", id=answered, error=error))
                    for answered in unreadable.answers_to
                )


class _Refusals:
    """Answers for the requests the SDK could not read, each line's written by a task of its own, one after another:
    written inline, one would stop reading stdin while the client is not reading stdout, and the end of input would
    never come. They count as owed answers, so reading pauses for them as for any other."""

    def __init__(self, answers: _WatchedOutput, unanswered: _Unanswered, group: anyio.abc.TaskGroup) -> None:
        self._answers, self._unanswered, self._group = answers, unanswered, group

    def refuse(self, error: Exception) -> Unreadable:
        unreadable = unreadable_message(error)
        ids = {"requestIds": logged_ids(unreadable.request_ids), "answersTo": logged_ids(unreadable.answers_to)}
        if len(unreadable.request_ids) > IDS_LOGGED:  # a batch of many requests: its log line stays short
            ids.update(requestIds=ids["requestIds"][:IDS_LOGGED], requestIdsNotLogged=len(unreadable.request_ids) - IDS_LOGGED)
        get_logger().warning("message.unreadable", **ids, problem=unreadable.error.message)
        if unreadable.request_ids:  # a client waiting on one of these ids would otherwise wait forever
            self._unanswered.note_owed(unreadable.request_ids)
            self._group.start_soon(self._send, unreadable)
        return unreadable

    def note_lost_id(self, item: Any) -> None:
        """A request the SDK read as a notification, as it does one whose id is neither a string nor an integer, is
        logged: there is no id to answer it by."""
        if (problem := lost_request_id(getattr(item, "message", None))) is not None:
            get_logger().warning("message.unreadable", requestIds=[], answersTo=[], problem=problem)

    async def _send(self, unreadable: Unreadable) -> None:
        with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):  # the session has ended
            for request_id in unreadable.request_ids:
                refusal = types.JSONRPCError(jsonrpc="2.0", id=request_id, error=unreadable.error)
                await self._answers.send(SessionMessage(refusal))


class _WatchedOutput(_Watched):
    """Notes each answer written."""

    async def send(self, item: Any) -> None:
        answer_id = _answer_id(item)
        self._unanswered.send_started(answer_id)
        try:
            await self._stream.send(item)
        finally:
            self._unanswered.send_taken(answer_id)
        if answer_id is not None:
            self._unanswered.note_written(answer_id)
