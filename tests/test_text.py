"""How messages show text they did not write: quoting, terminal safety, JSON a person approves."""

from __future__ import annotations

import json

import pytest

from skill_mcp.text import encodable, fit, json_for_people, os_error_text, printable, quoted, quoted_path, quoted_uri

REORDERING = ["\x85", "\x9b", "\x7f", "\u061c", "\u200e", "\u200f", "\u202a", "\u202e", "\u2066", "\u2069"]
HIDING = ["\u200b", "\u200d", "\u2060", "\ufeff", "\u2028", "\u2029",
          "\u00ad", "\u034f", "\u115f", "\u1160", "\u180e", "\u2064", "\u3164", "\ufe0f", "\uffa0",
          "\u17b4", "\u180b", "\u206a", "\ufff0", "\U0001bca0", "\U0001d173", "\U000e0041", "\U000e0100"]  # fmt: skip


def test_quoted_cuts_past_the_limit_only():
    assert quoted("a" * 120) == json.dumps("a" * 120)
    assert quoted("a" * 121) == json.dumps("a" * 120 + "…", ensure_ascii=False)


def test_fit_cuts_to_the_room_its_last_character_an_ellipsis_and_gives_nothing_without_room():
    assert [fit("abcd", room) for room in (5, 4, 3, 1, 0, -2)] == ["abcd", "abcd", "ab…", "…", "", ""]


def test_a_path_is_quoted_whole_up_to_four_times_the_longest_usable_one():
    assert quoted_path("p" * 4096) == json.dumps("p" * 4096)
    assert quoted_path("p" * 4097).endswith('p…"')


def test_a_uri_is_quoted_whole_up_to_the_longest_one_naming_a_usable_path():
    # "skill://", a 64-character name, "/", 1024 characters of 4 UTF-8 bytes each, each byte "%XX"
    longest = "skill://" + "n" * 64 + "/" + "%F0%9F%98%80" * 1024
    assert quoted_uri(longest) == json.dumps(longest)
    assert quoted_uri(longest + "x").endswith('0…"')


@pytest.mark.parametrize("character", REORDERING)
def test_characters_that_reorder_a_line_are_escaped_for_people(character):
    text = json.dumps({"argv": [f"safe{character}yp.mr"]}, ensure_ascii=False)
    shown = json_for_people(text)
    assert character not in shown and f"\\u{ord(character):04x}" in shown
    assert json.loads(shown) == json.loads(text)  # the same value to a parser
    assert printable(f"a{character}b") == f"a\\u{ord(character):04x}b"


@pytest.mark.parametrize("character", HIDING)
def test_what_shows_as_nothing_or_as_a_line_break_is_escaped_for_people_only(character):
    text = json.dumps(f"scripts/a{character}b.py", ensure_ascii=False)
    assert json.loads(json_for_people(text)) == f"scripts/a{character}b.py"
    assert character not in json_for_people(text)
    assert printable(f"a{character}b") == f"a{character}b"  # a terminal line keeps an emoji's joiner


def test_accents_and_the_json_layout_stay_as_they_are_for_people():
    text = json.dumps({"accents": "café ✓", "layout": [1, 2]}, indent=2, ensure_ascii=False)
    assert json_for_people(text) == text


def test_a_terminal_line_keeps_no_c0_control():
    assert printable("a\x1b[2J\tb\x00") == "a\\u001b[2J\\u0009b\\u0000"


def test_encodable_and_os_error_text():
    assert encodable("bad\udcff") == "bad\\udcff"
    assert os_error_text(PermissionError(13, "Permission denied", "/x")) == "Permission denied"
    assert os_error_text(OSError("no errno")) == "no errno"
