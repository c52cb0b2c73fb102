"""What the server says about a line the SDK's stdio reader refuses (skill_mcp/unreadable.py); the wire itself is
tested in test_stdio.py."""

from __future__ import annotations

import mcp_types as types
import pytest
from pydantic import ValidationError

from skill_mcp.limits import MAX_MESSAGE_CHARS
from skill_mcp.unreadable import LINE_CUT, Unreadable, lost_request_id, unreadable_message


def refused(line: str) -> Unreadable:
    with pytest.raises(ValidationError) as raised:
        types.jsonrpc_message_adapter.validate_json(line, by_name=False)
    return unreadable_message(raised.value)


@pytest.mark.parametrize(
    ("line", "request_id", "answer_to", "code"),
    [
        ('{"jsonrpc":"2.0","id":1,"method":"ping","params":[]}', 1, None, types.INVALID_PARAMS),
        ('{"jsonrpc":"2.0","id":"a","method":"ping","params":"x"}', "a", None, types.INVALID_PARAMS),
        ('{"jsonrpc":"1.0","id":2,"method":"ping"}', 2, None, types.INVALID_REQUEST),
        ('{"jsonrpc":"2.0","id":3,"method":{"method":"x","id":99}}', 3, None, types.INVALID_REQUEST),
        ('{"jsonrpc":{"method":"m","id":96},"id":4,"method":"ping"}', 4, None, types.INVALID_REQUEST),
        ('{"jsonrpc":"2.0","id":5,"method":"ping","params":{"x":"\\ud800"}}', 5, None, types.PARSE_ERROR),
        ('{"jsonrpc":"2.0","id":6,"result":null}', None, 6, types.INVALID_REQUEST),
        ('{"jsonrpc":"2.0","id":3}', None, None, types.INVALID_REQUEST),  # neither: it fails no question of the server's
        ('{"jsonrpc":"2.0","id":true,"method":"ping","params":[]}', None, None, types.INVALID_PARAMS),
        ('{"jsonrpc":"2.0","id":"\\udc80","method":"ping","params":[]}', None, None, types.PARSE_ERROR),
        ('{"jsonrpc":"2.0","method":"notifications/initialized","params":[1]}', None, None, types.INVALID_PARAMS),
        ('{"jsonrpc":"2.0","id":7,"method":"ping","params":' + "[" * 5000 + "]" * 5000 + "}", 7, None, types.PARSE_ERROR),
        ('{"jsonrpc":"2.0","params":{"a":' + "[" * 5000 + "]" * 5000 + '},"id":"late","method":"m"}', "late", None, types.PARSE_ERROR),
        ('{"jsonrpc":"2.0","id":' + "[" * 5000 + "]" * 5000 + ',"method":"m"}', None, None, types.PARSE_ERROR),
        ('{"jsonrpc":"2.0","id":8,"method":"m","params":{"id":99,"a":' + "[" * 5000 + "]" * 5000 + "}}", 8, None, types.PARSE_ERROR),
        ("garbage", None, None, types.PARSE_ERROR),
        ('"a string"', None, None, types.INVALID_REQUEST),  # JSON, but no JSON-RPC message
        ("[1, 2]", None, None, types.INVALID_REQUEST),
        ("[]", None, None, types.INVALID_REQUEST),
    ],
)
def test_only_a_request_or_an_answer_whose_own_id_can_be_read_is_named(line, request_id, answer_to, code):
    unreadable = refused(line)
    request_ids = () if request_id is None else (request_id,)
    answers_to = () if answer_to is None else (answer_to,)
    assert (unreadable.request_ids, unreadable.answers_to, unreadable.error.code) == (request_ids, answers_to, code)
    assert unreadable.error.message


def test_the_reason_names_what_is_wrong():
    assert refused('{"jsonrpc":"2.0","id":1,"method":"ping","params":[]}').error.message == (
        'invalid params: "params" must be an object, whose members name the parameters, not an array'
    )
    assert refused('{"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":"\\ud800"}}').error.message == (
        "the message is not strict JSON: a string in it holds a lone surrogate escape (\\ud800-\\udfff), "
        "which is no character"
    )
    assert refused('{"jsonrpc":"2.0","id":6,"result":null}').error.message == "the message is not a valid response"
    # nested past the SDK's parser's limit, not Python's: the parser's own reason
    nested = refused('{"jsonrpc":"2.0","id":1,"method":"ping","params":' + "[" * 300 + "]" * 300 + "}").error.message
    assert nested.startswith("the message is not strict JSON: ") and "recursion limit exceeded" in nested
    deep = '{"jsonrpc":"2.0","id":7,"method":"ping","params":' + "[" * 5000 + "]" * 5000 + "}"
    assert refused(deep).error.message == "the message nests deeper than the server reads"


def test_a_deep_message_is_read_for_its_id_from_string_to_string_within_a_bounded_number_of_strings():
    # Read on the event loop: a 50 MB nest must not hold it (or a signal's exit) for seconds; brackets between
    # strings are counted at C speed, however they are mixed with other characters.
    head, tail = '{"jsonrpc":"2.0","method":"ping","params":', ',"id":7}'
    assert refused(head + "[" * 1_000_000 + "]" * 1_000_000 + tail).request_ids == (7,)
    assert refused(head + "[0," * 60_000 + "0" + "]" * 60_000 + tail).request_ids == (7,)
    assert refused(head + '["]", {"}": 1}]' + tail).request_ids == (7,)  # brackets inside strings are no nesting
    # Past the budget of strings, what was not read yet is not read: this id comes after 200,000 strings.
    assert refused(head + "[" * 5000 + '"a",' * 200_000 + "0" + "]" * 5000 + tail).request_ids == ()


def test_a_line_cut_inside_a_string_is_refused_by_the_id_read_before_the_cut():
    # The transport keeps the start of a line past MAX_MESSAGE_CHARS: the members read before the cut still count.
    cut = '{"jsonrpc":"2.0","id":9,"method":"ping","params":{"text":"' + "a" * 1000 + LINE_CUT
    unreadable = refused(cut)
    assert (unreadable.request_ids, unreadable.answers_to, unreadable.error.code) == ((9,), (), types.PARSE_ERROR)
    assert unreadable.error.message.startswith(f"the line is longer than {MAX_MESSAGE_CHARS} characters")
    assert refused("x" + cut).request_ids == ()  # no JSON object: no member of one


def test_each_request_in_a_batch_is_refused_by_its_own_id():
    batch = (
        '[{"jsonrpc":"2.0","id":1,"method":"tools/list"},{"jsonrpc":"2.0","method":"notifications/initialized"},'
        '{"jsonrpc":"2.0","id":"b","method":"ping"},{"jsonrpc":"2.0","id":2,"result":{}},'
        '{"jsonrpc":"2.0","id":2.5,"method":"ping"},"text",{"jsonrpc":"2.0","id":"\\udc80","method":"ping"},'
        '{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","id":"q","error":{"code":1,"message":"m"}},'
        '{"jsonrpc":"2.0","id":5}]'
    )
    unreadable = refused(batch)
    # The requests are answered, once per id, and the answers to the server's requests fail them; the
    # notification and what is no message (nor an answer) are left alone.
    assert (unreadable.request_ids, unreadable.answers_to) == ((1, "b"), (2, "q"))
    assert unreadable.error.code == types.INVALID_REQUEST
    assert "batch" in unreadable.error.message and "its own line" in unreadable.error.message
    assert refused('[{"jsonrpc":"2.0","id":1,"method":"ping"}]').error == unreadable.error


@pytest.mark.parametrize("line", ['{"jsonrpc":"2.0","id":2.5,"method":"tools/list"}', '{"jsonrpc":"2.0","id":null,"method":"tools/list"}'])
def test_a_request_whose_id_the_sdk_cannot_read_is_named_as_unanswerable(line):
    # The SDK reads it as a notification, which gets no answer: only the log can say what happened.
    message = types.jsonrpc_message_adapter.validate_json(line, by_name=False)
    assert isinstance(message, types.JSONRPCNotification)
    assert lost_request_id(message) == (
        'a message for method "tools/list" with no usable id is read as a notification, which gets no answer: '
        'a request\'s "id" is a string or an integer'
    )


def test_a_notification_is_not_a_lost_request():
    notification = types.JSONRPCNotification(jsonrpc="2.0", method="notifications/initialized")
    assert lost_request_id(notification) is None
    assert lost_request_id(types.JSONRPCRequest(jsonrpc="2.0", id=1, method="ping")) is None


def test_a_batch_fails_at_most_16_requests_of_the_servers():
    # The server has one question out at a time: more answers than that are no honest client's.
    answers = ",".join(f'{{"jsonrpc":"2.0","id":{n},"result":{{}}}}' for n in range(40))
    assert refused(f"[{answers}]").answers_to == tuple(range(16))
