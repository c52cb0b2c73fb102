"""What to say about a line the SDK's stdio reader could not read as an MCP message (SPEC §5.1 lets it drop
such lines): its JSON-RPC error, and whose id it carries, so a client waiting on that id gets an answer."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

import mcp_types as types
from mcp.shared.dispatcher import as_request_id
from mcp_types import RequestId
from pydantic import ValidationError

from .limits import MAX_MESSAGE_CHARS
from .schemas import json_type
from .text import encodes_as_utf8, quoted


@dataclass(frozen=True, slots=True)
class Unreadable:
    """A line the SDK's stdio reader refused: the JSON-RPC error that says why, and, where they can be read, the
    ids of the client's requests it held, and of the server's requests it answers (one, or a batch's)."""

    error: types.ErrorData
    request_ids: tuple[RequestId, ...] = ()
    answers_to: tuple[RequestId, ...] = ()


def unreadable_message(error: Exception) -> Unreadable:
    """What was wrong with a line the SDK's stdio reader refused (`error`, its pydantic error)."""
    details = error.errors(include_url=False) if isinstance(error, ValidationError) else []
    for detail in details:
        if isinstance(detail.get("input"), list) and len(detail["loc"]) == 1:
            return _refused_batch(detail["input"])
        if detail["type"] == "json_invalid":
            if isinstance(detail["input"], str) and detail["input"].endswith(LINE_CUT):
                message = _top_level(detail["input"], partial=True)
                return _addressed(message, types.ErrorData(code=types.PARSE_ERROR, message=_TOO_LONG))
            try:  # Python's parser takes some of what pydantic's refuses, enough to read the request's id
                message = json.loads(detail["input"])
            except RecursionError:  # its own top level still names the id
                too_deep = types.ErrorData(code=types.PARSE_ERROR, message="the message nests deeper than the server reads")
                return _addressed(_top_level(detail["input"]), too_deep)
            except (TypeError, ValueError):
                return Unreadable(types.ErrorData(code=types.PARSE_ERROR, message=f"the line is not JSON: {detail['msg']}"))
            if isinstance(message, list):  # a batch is refused as one, whatever pydantic disliked in it
                return _refused_batch(message)
            not_strict = f"the message is not strict JSON: {_why_not_strict(message, detail['msg'])}"
            return _addressed(message, types.ErrorData(code=types.PARSE_ERROR, message=not_strict))
        if _is_the_message(detail):
            return _addressed(detail["input"], _invalid_request(detail["input"]))
    return Unreadable(types.ErrorData(code=types.INVALID_REQUEST, message="the line is not a JSON-RPC 2.0 message"))


def _addressed(message: Any, refusal: types.ErrorData) -> Unreadable:
    """`refusal`, with the id of the request it answers, or of the server's request the message answers."""
    message_id = _answerable_id(message)
    if message_id is None:
        return Unreadable(refusal)
    if "method" in message:
        return Unreadable(refusal, request_ids=(message_id,))
    if "result" in message or "error" in message:
        return Unreadable(refusal, answers_to=(message_id,))
    return Unreadable(refusal)


def lost_request_id(message: Any) -> str | None:
    """What is wrong with a notification that is a request whose id the SDK could not read (2.5, null, true): it
    reads one as a notification, which nothing answers. Every MCP notification's method starts "notifications/"."""
    if not isinstance(message, types.JSONRPCNotification) or message.method.startswith("notifications/"):
        return None
    return (
        f"a message for method {quoted(message.method)} with no usable id is read as a notification, which gets no "
        'answer: a request\'s "id" is a string or an integer'
    )


# Appended by the transport to the start it kept of a line over MAX_MESSAGE_CHARS: no JSON text holds a NUL.
LINE_CUT = "\x00skill-mcp: line cut"
_TOO_LONG = (
    f"the line is longer than {MAX_MESSAGE_CHARS} characters, the most a message to this server may be; it was not "
    "read (a call's arguments name files rather than carry them)"
)
_BATCH = types.ErrorData(
    code=types.INVALID_REQUEST,
    message=(
        "the line is a JSON array (a batch), which this server does not read: MCP carries one message per line "
        "(batches were removed in protocol 2025-06-18); send each message on its own line"
    ),
)


# The server has few requests of its own outstanding (one confirmation question, runs one at a time): a batch
# of more answers than this is no client's honest answer, and failing each would be work for nothing.
_ANSWERS_READ = 16


def _refused_batch(messages: list[Any]) -> Unreadable:
    """Each request in a batch is refused by its own id, and each request of the server's it answers fails, so
    nobody waits on one; nothing in it is run or taken as an answer."""
    objects = [message for message in messages if isinstance(message, dict)]
    requests = [message for message in objects if "method" in message]
    answers = [message for message in objects if "method" not in message and ("result" in message or "error" in message)]
    return Unreadable(_BATCH, request_ids=_distinct_ids(requests), answers_to=_distinct_ids(answers)[:_ANSWERS_READ])


def _distinct_ids(messages: list[Any]) -> tuple[RequestId, ...]:
    ids = (_answerable_id(message) for message in messages)
    return tuple(dict.fromkeys(each for each in ids if each is not None))


def _answerable_id(message: Any) -> RequestId | None:
    """The id an answer to `message` would carry, by the SDK's id rules; None when there is none to carry."""
    message_id = as_request_id(message.get("id")) if isinstance(message, dict) else None
    if isinstance(message_id, str) and not _encodes(message_id):
        return None  # an id no answer could carry back
    return message_id


_NESTED = object()  # a member whose value is an object or an array, not read
_WHITESPACE = re.compile(r"[ \t\n\r]*")


def _top_level(text: str, partial: bool = False) -> dict[str, Any]:
    """The members of the JSON object `text`, read without recursion: flat values as they are, nested ones as
    _NESTED; {} when `text` is no such object (`partial`: the start of one, the members read before it ends). It runs on the event loop, so it goes from string to string,
    counting the brackets between them at C speed, and stops after _TOP_LEVEL_STRINGS strings with the members
    read by then."""
    if not text.lstrip().startswith("{"):
        return {}
    decoder, members, depth, index = json.JSONDecoder(), {}, 0, 0
    try:
        for _ in range(_TOP_LEVEL_STRINGS):
            quote = text.find('"', index)
            end = len(text) if quote < 0 else quote
            depth += sum(text.count(bracket, index, end) for bracket in "{[") - sum(
                text.count(bracket, index, end) for bracket in "}]"
            )
            if quote < 0:
                break
            string, index = json.decoder.scanstring(text, quote + 1)
            colon = _WHITESPACE.match(text, index).end()
            if depth == 1 and text[colon : colon + 1] == ":":
                value = _WHITESPACE.match(text, colon + 1).end()
                if text[value : value + 1] in ("{", "["):
                    members[string], index = _NESTED, value
                else:
                    members[string], index = decoder.raw_decode(text, value)
    except ValueError:
        return members if partial else {}
    return members


_TOP_LEVEL_STRINGS = 100_000  # a few tens of milliseconds; a message's own members come before that many strings


def _is_the_message(detail: Any) -> bool:
    """Whether a pydantic error of the message union holds the whole message as its input: an error at one of
    the four shapes itself, or a field missing from one; an error at a field holds that field's value."""
    location = detail["loc"]
    at_the_message = len(location) == 1 or (len(location) == 2 and detail["type"] == "missing")
    return at_the_message and isinstance(detail.get("input"), dict)


def _why_not_strict(message: Any, parser_said: str) -> str:
    if _encodes(message):
        return parser_said
    return "a string in it holds a lone surrogate escape (\\ud800-\\udfff), which is no character"


def _encodes(value: Any) -> bool:
    return encodes_as_utf8(json.dumps(value, ensure_ascii=False))


def _invalid_request(message: dict[str, Any]) -> types.ErrorData:
    if "method" not in message:
        shape = "a valid response" if "result" in message or "error" in message else "a request or a response"
        return types.ErrorData(code=types.INVALID_REQUEST, message=f"the message is not {shape}")
    if message.get("jsonrpc") != "2.0":
        return types.ErrorData(code=types.INVALID_REQUEST, message='invalid request: "jsonrpc" must be "2.0"')
    if not isinstance(message["method"], str):
        return types.ErrorData(code=types.INVALID_REQUEST, message='invalid request: "method" must be a string')
    if not isinstance(message.get("params", {}), dict):
        text = f'invalid params: "params" must be an object, whose members name the parameters, not {json_type(message["params"])}'
        return types.ErrorData(code=types.INVALID_PARAMS, message=text)
    return types.ErrorData(code=types.INVALID_REQUEST, message="invalid request: it is not a JSON-RPC 2.0 request")
