"""How messages show text they did not write: quoting, terminal safety, JSON a person approves."""

from __future__ import annotations

import json

import pytest

from skill_mcp.text import encodable, json_for_people, os_error_text, printable, quoted, quoted_path

REORDERING = ["\x85", "\x9b", "\x7f", "\u061c", "\u200e", "\u200f", "\u202a", "\u202e", "\u2066", "\u2069"]


def test_quoted_cuts_past_the_limit_only():
    assert quoted("a" * 120) == json.dumps("a" * 120)
    assert quoted("a" * 121) == json.dumps("a" * 120 + "…", ensure_ascii=False)


def test_a_path_is_quoted_whole_up_to_four_times_the_longest_usable_one():
    assert quoted_path("p" * 4096) == json.dumps("p" * 4096)
    assert quoted_path("p" * 4097).endswith('p…"')


@pytest.mark.parametrize("character", REORDERING)
def test_characters_that_reorder_a_line_are_escaped_for_people(character):
    text = json.dumps({"argv": [f"safe{character}yp.mr"]}, ensure_ascii=False)
    shown = json_for_people(text)
    assert character not in shown and f"\\u{ord(character):04x}" in shown
    assert json.loads(shown) == json.loads(text)  # the same value to a parser
    assert printable(f"a{character}b") == f"a\\u{ord(character):04x}b"


def test_only_what_reorders_is_escaped_in_json_for_people():
    text = json.dumps({"emoji": "👩\u200d💻", "accents": "café", "layout": [1, 2]}, indent=2, ensure_ascii=False)
    assert json_for_people(text) == text  # a joiner, accents and the layout's line breaks stay


def test_a_terminal_line_keeps_no_c0_control():
    assert printable("a\x1b[2J\tb\x00") == "a\\u001b[2J\\u0009b\\u0000"


def test_encodable_and_os_error_text():
    assert encodable("bad\udcff") == "bad\\udcff"
    assert os_error_text(PermissionError(13, "Permission denied", "/x")) == "Permission denied"
    assert os_error_text(OSError("no errno")) == "no errno"
