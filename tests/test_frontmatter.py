"""SKILL.md splitting, the YAML rules and the JSON echo (SPEC §4.1, §4.2, §4.5; acceptance 48–54)."""

from __future__ import annotations

import datetime

import pytest

from skill_mcp.frontmatter import (
    FrontmatterError,
    description,
    frontmatter_name,
    frontmatter_to_json,
    json_key,
    parse_skill_md,
    when_to_use,
)


def error_of(text: str, truncated: bool = False) -> str:
    with pytest.raises(FrontmatterError) as caught:
        parse_skill_md(text, truncated=truncated)
    return str(caught.value)


# §4.1 splitting


def test_body_is_verbatim_including_a_later_delimiter():
    body = "# Title\n\n---\nmore\n---\n  trailing  \n"
    assert parse_skill_md("---\nname: a\n---\n" + body) == ({"name": "a"}, body)


def test_body_keeps_its_leading_blank_lines():
    # §4.1: the body is everything after the closing line and its newline, verbatim.
    assert parse_skill_md("---\nname: a\n---\n\n\nBody\n") == ({"name": "a"}, "\n\nBody\n")


def test_crlf_opener_and_closer():
    assert parse_skill_md("---\r\nname: a\r\n---\r\nbody\r\n") == ({"name": "a"}, "body\r\n")


def test_closer_may_carry_spaces_and_tabs_and_end_the_text():
    assert parse_skill_md("---\nname: a\n--- \t") == ({"name": "a"}, "")
    assert parse_skill_md("---\nname: a\n---  \nbody") == ({"name": "a"}, "body")


def test_a_dashes_line_with_more_text_does_not_close():
    assert error_of("---\nname: a\n---x\n") == (
        'the SKILL.md frontmatter block is never closed (no "---" line after the opening one)'
    )


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("name: a\n---\n", 'its first line must be "---", then the YAML, then a closing "---" line'),
        ("\ufeff---\nname: a\n---\n", "it starts with a byte order mark; save it as UTF-8 without one"),
        ("--- \nname: a\n---\n", 'its first line must be exactly "---", with nothing after it'),
        ("----\r\nname: a\n---\n", 'its first line must be exactly "---", with nothing after it'),
        ("---", 'the "---" line must end with a line break'),
        ("", "the file is empty"),
    ],
)
def test_missing_opener_says_what_to_change(text, why):
    assert error_of(text) == f'SKILL.md does not begin with a "---" frontmatter block: {why}'


@pytest.mark.parametrize("text", ["---\nname: a\n", "---\n---\n", "---\nname: a\nbody --- here\n"])
def test_unclosed_block(text):
    assert "never closed" in error_of(text)


@pytest.mark.parametrize("text", ["---\n---\n", "---\r\n---\r\nbody\r\n", "---\n---"])
def test_dashes_right_after_the_opener_are_explained(text):
    # §4.1: they do not close the block, and "no closing line" would contradict what the author sees.
    assert error_of(text) == (
        'the SKILL.md frontmatter block is never closed (the "---" right after the opening line does not close it: '
        'the closing "---" comes after the YAML lines)'
    )


def test_empty_block_is_not_a_mapping():
    assert error_of("---\n\n---\n") == "SKILL.md frontmatter is not a mapping of keys to values"


def test_block_over_65536_bytes():
    raw = "a: " + "é" * 32767 + "\n"  # 3 + 65534 + 1 bytes
    assert error_of(f"---\n{raw}---\n") == "the SKILL.md frontmatter block is 65538 bytes, over the 65536-byte cap"
    one_over = "a: " + "x" * 65533 + "\n"
    assert error_of(f"---\n{one_over}---\n") == "the SKILL.md frontmatter block is 65537 bytes, over the 65536-byte cap"


def test_a_block_the_read_cut_before_its_closer_is_over_the_cap():
    cut = "---\na: " + "x" * 65534
    assert error_of(cut, truncated=True) == "the SKILL.md frontmatter block is more than 65537 bytes, over the 65536-byte cap"
    # A cut within the cap tells nothing of the block's size: it is unclosed as far as it was read.
    assert "never closed" in error_of("---\na: x", truncated=True)
    # Read whole, the file is known to hold no closer: that is the fault, whatever the block's size.
    assert "never closed" in error_of(cut)
    # A cut at exactly 65536 bytes of YAML could still have had its closer right after the cut.
    assert "never closed" in error_of("---\na: " + "x" * 65532 + "\n", truncated=True)


def test_block_of_exactly_65536_bytes_is_read():
    raw = "a: " + "x" * 65532 + "\n"
    assert parse_skill_md(f"---\n{raw}---\n") == ({"a": "x" * 65532}, "")


# §4.2 YAML rules


def test_yaml_errors_are_positioned_in_skill_md():
    assert error_of("---\nname: a\nb: [1\n---\n") == (
        "SKILL.md frontmatter is not valid YAML: while parsing a flow sequence, "
        "expected ',' or ']', but got '<stream end>' (line 4, column 1); "
        "the flow sequence that begins at line 3, column 4 is never closed"
    )
    assert error_of("---\nname: a\n\tb: 1\n---\n") == (
        "SKILL.md frontmatter is not valid YAML: while scanning for the next token, "
        "found character '\\t' that cannot start any token (line 3, column 1); use spaces, not tabs, in the frontmatter"
    )
    # the slip authors make most says how to fix it
    assert error_of("---\nname: a\ndescription: Use when: asked\n---\n") == (
        "SKILL.md frontmatter is not valid YAML: mapping values are not allowed here (line 3, column 22); "
        'quote a value that contains ": ", and indent a key only under a key'
    )
    # an error the scanner marks only by where it was reading: that mark is the position
    assert error_of("---\nname: a\ndescription: |\n  \n    text\n---\n") == (
        "SKILL.md frontmatter is not valid YAML: more indented follow up line than first in a block scalar "
        "(line 5, column 5)"
    )


CLOSED_EARLY = (
    "; the quoted or bracketed value before it closed there, so the rest is left over: quote the whole value"
    """ (inside '...' write an apostrophe as '', inside "..." write a quote as \\")"""
)


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        # text on the block scalar's own line, as published skills write it
        ("description: | Use when asked.", "while scanning a block scalar, expected a comment or a line break, but found "
         """'U' (line 3, column 16); after "|" or ">" the text starts on the next line, indented"""),
        # a value that starts with a character YAML reserves
        ("description: `gh` helper", "while scanning for the next token, found character '`' that cannot start any "
         'token (line 3, column 14); quote a value that begins with "`"'),
        ("description: @bot replies", "while scanning for the next token, found character '@' that cannot start any "
         'token (line 3, column 14); quote a value that begins with "@"'),
        ("description: %d items left", "while scanning for the next token, found character '%' that cannot start any "
         'token (line 3, column 14); quote a value that begins with "%"'),
        # a template's placeholder, read as a mapping keyed by a mapping
        ("description: {{ skill_description }}", "while constructing a mapping, found unhashable key (line 3, column 15); "
         'a value that begins with "{" is read as a mapping: quote it if it is text'),
        # a quote or bracket that closes before the author's text ends
        ("description: 'the user's files'", f"while parsing a block mapping, expected <block end>, but found "
         f"'<scalar>' (line 3, column 24){CLOSED_EARLY}"),
        ('description: "say "yes" first"', f"while parsing a block mapping, expected <block end>, but found "
         f"'<scalar>' (line 3, column 20){CLOSED_EARLY}"),
        ("description: [Draft] notes helper", f"while parsing a block mapping, expected <block end>, but found "
         f"'<scalar>' (line 3, column 22){CLOSED_EARLY}"),
    ],
)
def test_the_slips_published_skills_make_say_how_to_fix_them(line, expected):
    assert error_of(f"---\nname: a\n{line}\n---\n") == f"SKILL.md frontmatter is not valid YAML: {expected}"


def test_a_value_closed_early_on_the_first_yaml_line_draws_the_quoting_tip():
    assert error_of("---\ndescription: 'the user's files'\nname: a\n---\n") == (
        "SKILL.md frontmatter is not valid YAML: while parsing a block mapping, expected <block end>, but found "
        f"'<scalar>' (line 2, column 24){CLOSED_EARLY}"
    )


def test_left_over_text_after_a_dedent_draws_no_quoting_tip():
    # the same parser words, but nothing was quoted: a line less indented than the block scalar it follows
    assert error_of("---\nd: |\n    text\n  more\n---\n") == (
        "SKILL.md frontmatter is not valid YAML: while parsing a block mapping, "
        "expected <block end>, but found '<scalar>' (line 4, column 3)"
    )


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ('a: 1\nd: "bell\x07"\n', "special characters are not allowed: U+0007 (line 3, column 9)"),
        ("d: nul\x00\n", "special characters are not allowed: U+0000 (line 2, column 7)"),
        ("d: \x9fx\n", "special characters are not allowed: U+009F (line 2, column 4)"),
        ('d: "x\\ud800y"\n', "a \\u escape gives a lone surrogate, which is not a character (line 2, column 4)"),
        ('"\\udc00": 1\n', "a \\u escape gives a lone surrogate, which is not a character (line 2, column 1)"),
        ('a: {1: x, "1": y}\n', 'the keys 1 and "1" in one mapping are both "1" in JSON'),
        ('2024-01-01: a\n"2024-01-01": b\n', 'the keys 2024-01-01 and "2024-01-01" in one mapping are both "2024-01-01" in JSON'),
        ('a:\n  - {x: 1}\n  - {"true": a, true: b}\n', 'the keys "true" and true in one mapping are both "true" in JSON'),
    ],
)
def test_what_no_json_answer_could_carry_is_a_yaml_error(raw, expected):
    # A control character is a ruamel ReaderError, which carries an offset instead of a mark; a lone surrogate
    # would pass the parser and break every answer that echoes the skill (the server's stdout writer); two keys
    # JSON writes alike would lose one, though §4.5 keeps every key the author wrote.
    assert error_of(f"---\n{raw}---\n") == f"SKILL.md frontmatter is not valid YAML: {expected}"


def test_escaped_surrogate_pairs_join_into_one_character():
    frontmatter, _ = parse_skill_md('---\nd: "\\ud83d\\ude00 \\U0001F600"\n\\ud83d\\ude00: k\n---\n')
    assert frontmatter == {"d": "\U0001F600 \U0001F600", "\\ud83d\\ude00": "k"}


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("a: &x 1\nb: *x\n", 'SKILL.md frontmatter uses an anchor or alias ("&x"), which is refused (line 2, column 4)'),
        ("a: *x\n", 'SKILL.md frontmatter uses an anchor or alias ("*x"), which is refused (line 2, column 4)'),
        ("%YAML 1.1\n--- {a: yes}\n", "SKILL.md frontmatter uses a directive (%YAML), which is refused (line 2, column 1)"),
        ("%YAML 1.1\n", "SKILL.md frontmatter uses a directive (%YAML), which is refused (line 2, column 1)"),
        ("%TAG !e! tag:e.com,2000:\n--- {a: 1}\n", "SKILL.md frontmatter uses a directive (%TAG), which is refused (line 2, column 1)"),
        ("a: 1\nb: !!binary aGk=\n", 'SKILL.md frontmatter uses the tag "!!binary", which is refused (line 3, column 4)'),
        ("a: !!set {x}\n", 'SKILL.md frontmatter uses the tag "!!set", which is refused (line 2, column 4)'),
        ("a: !!str x\n", 'SKILL.md frontmatter uses the tag "!!str", which is refused (line 2, column 4)'),
        ("a: !foo x\n", 'SKILL.md frontmatter uses the tag "!foo", which is refused (line 2, column 4)'),
        ("a: ! x\n", 'SKILL.md frontmatter uses the tag "!", which is refused (line 2, column 4)'),
        ("a: !<tag:e.com,2000:x> x\n", 'SKILL.md frontmatter uses the tag "!<tag:e.com,2000:x>", which is refused (line 2, column 4)'),
        ("a:\n  - !!map {}\n", 'SKILL.md frontmatter uses the tag "!!map", which is refused (line 3, column 5)'),
    ],
)
def test_refused_yaml_features(raw, expected):
    text_tip = "" if "directive" in expected else "; if it is meant as text, quote the value"
    assert error_of(f"---\n{raw}---\n") == expected + text_tip


def test_star_and_ampersand_inside_scalars_are_fine():
    text = "---\ndescription: Run *all* tests\nnote: Q &A\nquoted: '&x *y !z'\n---\n"
    assert parse_skill_md(text)[0] == {"description": "Run *all* tests", "note": "Q &A", "quoted": "&x *y !z"}


def test_duplicate_keys_are_refused_without_their_values():
    # the detail is logged at boot, and values are file contents
    assert error_of("---\na: secret-one\na: secret-two\n---\n") == (
        'SKILL.md frontmatter is not valid YAML: while constructing a mapping, found duplicate key "a" (line 3, column 1)'
    )
    # YAML and JSON keep 1 and true apart; a Python mapping cannot, so the author is told to rename one
    assert error_of("---\n1: a\ntrue: b\n---\n") == (
        "SKILL.md frontmatter is not valid YAML: while constructing a mapping, "
        "the keys 1 and true are one key to this parser; rename one (line 3, column 1)"
    )
    # every .nan is the same float to the parser, and NaN equals nothing, not even itself
    assert error_of("---\nm:\n  .nan: a\n  .NaN: b\n---\n").startswith(
        "SKILL.md frontmatter is not valid YAML: while constructing a mapping, found duplicate key"
    )


def test_multiple_documents_are_refused():
    assert error_of("---\na: 1\n--- {b: 2}\n---\n") == (
        "SKILL.md frontmatter is not valid YAML: expected a single document in the stream, "
        "but found another document (line 3, column 1)"
    )


@pytest.mark.parametrize("raw", ["- a\n- b\n", "just text\n", "42\n", "null\n"])
def test_non_mapping_values(raw):
    assert error_of(f"---\n{raw}---\n") == "SKILL.md frontmatter is not a mapping of keys to values"


def test_yaml_1_2_core_resolution():
    raw = "a: yes\nb: on\nc: no\nd: off\ne: 017\nf: 0o17\ng: true\nh: ~\ni: 1.5\n"
    assert parse_skill_md(f"---\n{raw}---\n")[0] == {
        "a": "yes", "b": "on", "c": "no", "d": "off", "e": 17, "f": 15, "g": True, "h": None, "i": 1.5,
    }


@pytest.mark.parametrize(
    ("text", "value"),
    [("0b101", "0b101"), ("1_000", "1_000"), ("1_0.5", "1_0.5"), ("-0x1F", "-0x1F"), ("0o8", "0o8"), ("0x1F", 31),
     ("+12", 12), ("-3", -3), (".5", 0.5), ("1.", 1.0), ("1e3", 1000.0), ("-1.5E-3", -0.0015), ("-.Inf", float("-inf"))],
)  # fmt: skip
def test_numbers_follow_the_core_schema(text, value):
    # ruamel's own 1.2 rules also read binary and "_"-separated numbers, which the core schema leaves as strings.
    loaded = parse_skill_md(f"---\nv: {text}\n---\n")[0]["v"]
    assert (loaded, type(loaded)) == (value, type(value))


def test_a_plain_equals_sign_is_a_string():
    # §4.2: YAML 1.2 core resolution has no "value" type; "=" is a plain string.
    assert parse_skill_md("---\nname: a\nassign: =\n---\n")[0] == {"name": "a", "assign": "="}


def test_a_merge_key_is_an_ordinary_key():
    # §4.2: YAML 1.2 core resolution has no merge type; §4.5: every key the author wrote is kept.
    assert parse_skill_md("---\nname: a\n<<: {name: b}\n---\n")[0] == {"name": "a", "<<": {"name": "b"}}


def test_dates_stay_date_values():
    frontmatter = parse_skill_md("---\nd: 2024-01-02\nt: 2024-01-02 10:00:00\n---\n")[0]
    assert frontmatter == {"d": datetime.date(2024, 1, 2), "t": datetime.datetime(2024, 1, 2, 10, 0)}


@pytest.mark.parametrize(
    ("raw_yaml", "problem"),
    [
        ("d: 2024-13-45\n", "month must be in 1..12 (line 2, column 4)"),
        ("name: a\nd: [x, 2024-02-30]\n", "day is out of range for month (line 3, column 8)"),
        ("t: 2024-01-01t25:00:00\n", "hour must be in 0..23 (line 2, column 4)"),
    ],
)
def test_impossible_date_is_a_yaml_error_at_its_position(raw_yaml, problem):
    # §4.2: the position is known (the date's own node); it used to be left out.
    assert error_of(f"---\n{raw_yaml}---\n") == f"SKILL.md frontmatter is not valid YAML: {problem}"


def test_a_list_inside_a_list_key_is_a_yaml_error_at_its_position():
    assert error_of("---\nname: a\n? [x, [y]]\n: 1\n---\n") == (
        "SKILL.md frontmatter is not valid YAML: while constructing a mapping, found unhashable key (line 3, column 3)"
    )


@pytest.mark.parametrize("number", ["9" * 5000, "0x" + "f" * 5000])
def test_integer_too_large_to_write_is_a_yaml_error(number):
    assert error_of(f"---\nname: a\nn: {number}\n---\n") == (
        "SKILL.md frontmatter is not valid YAML: the integer is too large (line 3, column 4)"
    )


def nested(levels: int) -> str:
    """A mapping whose leaf scalar is `levels` nodes deep, counting the top mapping as one."""
    return "---\n" + "".join("  " * depth + f"k{depth}:\n" for depth in range(levels - 2)) + "  " * (levels - 2) + "k: v\n---\n"


def test_sixteen_levels_are_allowed():
    frontmatter = parse_skill_md(nested(16))[0]
    for depth in range(14):
        frontmatter = frontmatter[f"k{depth}"]
    assert frontmatter == {"k": "v"}


def test_seventeen_levels_are_refused_and_the_next_parse_still_works():
    assert error_of(nested(17)) == (
        "SKILL.md frontmatter is not valid YAML: nesting is deeper than 16 levels (line 17, column 31)"
    )
    assert parse_skill_md("---\nname: a\non: yes\n---\n") == ({"name": "a", "on": "yes"}, "")


def test_deep_flow_nesting_is_refused():
    assert "nesting is deeper than 16 levels" in error_of("---\na: " + "[" * 5000 + "]" * 5000 + "\n---\n")


# §4.5 JSON echo


def test_frontmatter_to_json():
    raw = (
        "1: one\nfalse: f\nnull: n\n2024-01-02: d\n[1, 2]: pair\n"
        "date: 2024-01-02\nstamp: 2024-01-02T03:04:05Z\nnaive: 2024-01-02 10:00:00\n"
        "nan: .nan\ninf: .inf\nninf: -.inf\nnested: {list: [1, 2.5, {x: 2001-12-14}]}\n"
    )
    assert frontmatter_to_json(parse_skill_md(f"---\n{raw}---\n")[0]) == {
        "1": "one", "false": "f", "null": "n", "2024-01-02": "d", "[1,2]": "pair",
        "date": "2024-01-02", "stamp": "2024-01-02T03:04:05+00:00", "naive": "2024-01-02T10:00:00",
        "nan": ".nan", "inf": ".inf", "ninf": "-.inf", "nested": {"list": [1, 2.5, {"x": "2001-12-14"}]},
    }


def test_a_sequence_key_is_json_text_with_its_dates_and_infinities_converted():
    # A YAML sequence key loads as a tuple; its items follow the same §4.5 rules as any value.
    frontmatter = parse_skill_md("---\n[2024-01-02, .inf]: v\n---\n")[0]
    assert frontmatter_to_json(frontmatter) == {'["2024-01-02",".inf"]': "v"}


@pytest.mark.parametrize(
    ("key", "text"),
    [("name", "name"), (1, "1"), (True, "true"), (None, "null"), (1.5, "1.5"), (float("-inf"), "-.inf"), ((1, "é"), '[1,"é"]')],
)
def test_json_key(key, text):
    assert json_key(key) == text


def test_string_fields():
    frontmatter = {"name": "a", "description": "d", "when-to-use": "hyphen", "when_to_use": "underscore"}
    assert (frontmatter_name(frontmatter), description(frontmatter), when_to_use(frontmatter)) == ("a", "d", "hyphen")
    assert when_to_use({"when-to-use": 5, "when_to_use": "underscore"}) == "underscore"
    # An empty hyphenated string is still a string, so it wins (SPEC §3.4).
    assert when_to_use({"when-to-use": "", "when_to_use": "underscore"}) == ""
    assert when_to_use({"when_to_use": "underscore"}) == "underscore"
    assert (frontmatter_name({"name": 1}), description({"description": None}), when_to_use({})) == (None, None, None)
