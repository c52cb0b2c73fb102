"""The relative-path string check (SPEC §6.1; acceptance 74–75)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from skill_mcp.paths import PATH_HINT, describe_refusal, is_within, path_refusal

EMPTY_SEGMENT = 'it has an empty segment (leading, trailing or doubled "/")'


@pytest.mark.parametrize(
    ("rel", "reason"),
    [
        ("/etc/passwd", EMPTY_SEGMENT),
        ("../outside.txt", 'it has a ".." segment'),
        ("scripts/../../x", 'it has a ".." segment'),
        ("./ok.js", 'it has a "." segment'),
        ("scripts//ok.js", EMPTY_SEGMENT),
        ("", "it is empty"),
        ("scripts\\ok.js", "it contains a backslash"),
        ("C:\\windows", "it contains a backslash"),
        ("%2e%2e/x", "it contains a percent escape"),
        ("a\0b.png", "it contains a NUL byte"),
        ("  ", "it has a whitespace-only segment"),
        ("scripts/", EMPTY_SEGMENT),
    ],
)
def test_spec_examples_are_refused_with_their_reason(rel, reason):
    assert path_refusal(rel) == reason


@pytest.mark.parametrize(
    ("rel", "reason"),
    [
        (None, "it is empty"),
        (7, "it is empty"),
        ("a" * 1025, "it is longer than 1024 characters"),
        ("bad\udcffname", "it is not valid UTF-8"),
        ("a/\t\n/b", "it has a whitespace-only segment"),
        ("a/\u3000", "it has a whitespace-only segment"),
    ],
)
def test_other_rules(rel, reason):
    assert path_refusal(rel) == reason


def test_rules_apply_in_table_order():
    assert path_refusal("x" * 1025 + "\0") == "it is longer than 1024 characters"
    assert path_refusal("\0\udcff\\%") == "it contains a NUL byte"
    assert path_refusal("\udcff\\%") == "it is not valid UTF-8"
    assert path_refusal("..\\%") == "it contains a backslash"
    assert path_refusal("../%") == "it contains a percent escape"


def test_segments_are_judged_in_path_order():
    assert path_refusal("../a//b") == 'it has a ".." segment'
    assert path_refusal("a//../b") == EMPTY_SEGMENT
    assert path_refusal(" /./b") == "it has a whitespace-only segment"


@pytest.mark.parametrize("rel", ["scripts/ok.js", "a" * 1024, ".hidden/..x/x..", "read me.txt", "é/日本.md", "SKILL.md"])
def test_usable_paths(rel):
    assert path_refusal(rel) is None


def test_refusal_message_and_hint():
    assert describe_refusal("../outside.txt", path_refusal("../outside.txt")) == (
        'path "../outside.txt" is not usable: it has a ".." segment'
    )
    assert "relative to the skill" in PATH_HINT
    assert "skill_load" in PATH_HINT


def test_refusal_message_cuts_long_paths_and_escapes_control_characters():
    # §6.1: the path is cut to 120 characters plus "…"; one of exactly 120 is shown whole.
    assert describe_refusal("é" * 120 + "/..", 'it has a ".." segment') == (
        'path "' + "é" * 120 + '…" is not usable: it has a ".." segment'
    )
    assert describe_refusal("é" * 1025, "it is longer than 1024 characters") == (
        'path "' + "é" * 120 + '…" is not usable: it is longer than 1024 characters'
    )
    assert describe_refusal("é" * 120, "it has a whitespace-only segment") == (
        'path "' + "é" * 120 + '" is not usable: it has a whitespace-only segment'
    )
    assert describe_refusal("a\0b.png", "it contains a NUL byte") == (
        'path "a\\u0000b.png" is not usable: it contains a NUL byte'
    )


def test_refusal_message_for_a_lone_surrogate_is_encodable():
    message = describe_refusal("bad\udcffname", "it is not valid UTF-8")
    assert message == 'path "bad\\udcffname" is not usable: it is not valid UTF-8'
    message.encode("utf-8")


SAFE_SEGMENT = st.text(alphabet="abcxyzABC019._- ", min_size=1, max_size=12).filter(
    lambda segment: segment not in (".", "..") and not segment.isspace()
)


@given(st.lists(SAFE_SEGMENT, min_size=1, max_size=8))
def test_plain_segments_joined_by_slash_are_accepted(segments):
    assert path_refusal("/".join(segments)) is None


@given(st.text(max_size=40), st.sampled_from(["\\", "%", "\0"]), st.text(max_size=40))
def test_backslash_percent_and_nul_are_always_refused(before, bad, after):
    assert path_refusal(before + bad + after) is not None


@given(st.lists(SAFE_SEGMENT, max_size=4), st.sampled_from(["", ".", ".."]), st.lists(SAFE_SEGMENT, max_size=4))
def test_a_dot_dotdot_or_empty_segment_anywhere_is_refused(head, bad, tail):
    assert path_refusal("/".join([*head, bad, *tail])) is not None


@given(st.text(max_size=60))
def test_refusal_is_none_or_a_reason_from_the_table(rel):
    reasons = {
        None, "it is empty", "it is longer than 1024 characters", "it contains a NUL byte", "it is not valid UTF-8",
        "it contains a backslash", "it contains a percent escape", EMPTY_SEGMENT, 'it has a "." segment',
        'it has a ".." segment', "it has a whitespace-only segment",
    }
    assert path_refusal(rel) in reasons


@pytest.mark.parametrize(
    ("path", "base", "strictly", "within"),
    [
        ("/r/skill/a.md", "/r/skill", False, True),
        ("/r/skill", "/r/skill", False, True),
        ("/r/skill", "/r/skill", True, False),
        ("/r/skill-evil/a.md", "/r/skill", False, False),  # a sibling sharing the name as a prefix
        ("/r/skill/a.md", "/r/skill/", False, True),
        ("/r", "/r/skill", False, False),
    ],
)
def test_is_within_compares_whole_segments(path, base, strictly, within):
    assert is_within(path, base, strictly=strictly) is within
