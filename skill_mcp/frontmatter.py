"""SKILL.md text → (frontmatter mapping, body), or a FrontmatterError with a position (SPEC §4.1–4.2, §4.5)."""

from __future__ import annotations

import datetime
import json
import math
import re
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.composer import MaxDepthExceededError
from ruamel.yaml.constructor import ConstructorError, SafeConstructor
from ruamel.yaml.error import MarkedYAMLError
from ruamel.yaml.reader import ReaderError
from ruamel.yaml.resolver import VersionedResolver
from ruamel.yaml.scanner import Scanner
from ruamel.yaml.tokens import AliasToken, AnchorToken, DirectiveToken, TagToken

from .limits import MAX_FRONTMATTER_BYTES, MAX_YAML_DEPTH
from .text import quoted

_OPENER = re.compile(r"---\r?\n")
_CLOSER = re.compile(r"\n---[ \t]*(?:\r?\n|\Z)")
# The raw YAML starts on SKILL.md's second line; ruamel counts lines and columns from 0.
_FIRST_YAML_LINE = 2
_NOT_YAML = "SKILL.md frontmatter is not valid YAML: "
_SURROGATE = re.compile("[\ud800-\udfff]")
_READING = re.compile(r"while (?:scanning|parsing) an? (.+)")  # a parser error's context: what it was reading
# The parser's words for the two slips authors make most, and what fixes each.
_YAML_TIPS = {
    "mapping values are not allowed here": '; quote a value that contains ": ", and indent a key only under a key',
    "found character '\\t'": "; use spaces, not tabs, in the frontmatter",
    "while scanning a block scalar, expected a comment or a line break": '; after "|" or ">" the text starts on the next line, indented',
}
# YAML reserves these at the start of a value, where authors mean them as text (`@user`, `` `cmd` ``).
_RESERVED_START = re.compile(r"found character '([@`%])' that cannot start any token")
# Text after a value that is already closed: what is left on the line once a quote or bracket closed it.
_LEFT_OVER = "expected <block end>, but found '<scalar>'"
_CLOSED_EARLY_TIP = (
    '; the quoted or bracketed value before it closed there, so the rest is left over: quote the whole value'
    " (inside '...' write an apostrophe as '', inside \"...\" write a quote as \\\")"
)


class FrontmatterError(Exception):
    """The frontmatter block is missing, unclosed, too large, not YAML, refused, or not a mapping."""


def parse_skill_md(text: str, truncated: bool = False) -> tuple[dict[Any, Any], str]:
    """Split SKILL.md into its parsed frontmatter mapping and its body, verbatim. `truncated`: `text` is only the
    start of the file, so a closer may lie past its end."""
    opener = _OPENER.match(text)
    if opener is None:
        raise FrontmatterError(f'SKILL.md does not begin with a "---" frontmatter block: {_why_no_opener(text)}')
    closer = _CLOSER.search(text, opener.end())
    if closer is None:
        unclosed = text[opener.end() :]
        if truncated and (size := _utf8_size(unclosed)) > MAX_FRONTMATTER_BYTES:
            raise FrontmatterError(_over_the_cap(f"more than {size}"))
        raise FrontmatterError(f"the SKILL.md frontmatter block is never closed ({_why_no_closer(unclosed)})")
    raw_yaml = text[opener.end() : closer.start() + 1]
    size = _utf8_size(raw_yaml)
    if size > MAX_FRONTMATTER_BYTES:
        raise FrontmatterError(_over_the_cap(str(size)))
    frontmatter = _load_yaml(raw_yaml)
    if not isinstance(frontmatter, dict):
        raise FrontmatterError("SKILL.md frontmatter is not a mapping of keys to values")
    _refuse_keys_written_alike(frontmatter)
    return frontmatter, text[closer.end() :]


def _utf8_size(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def _over_the_cap(size: str) -> str:
    return f"the SKILL.md frontmatter block is {size} bytes, over the {MAX_FRONTMATTER_BYTES}-byte cap"


def _why_no_closer(after_opener: str) -> str:
    if _CLOSER.match("\n" + after_opener):  # `---\n---`: the closer's newline is the opener's own, which it cannot share
        return 'the "---" right after the opening line does not close it: the closing "---" comes after the YAML lines'
    return 'no "---" line after the opening one'


def _why_no_opener(text: str) -> str:
    """The author's likely slip, so the fix is in the message (an editor's BOM or a stray space is invisible)."""
    if not text:
        return "the file is empty"
    first_line = text.split("\n", 1)[0].rstrip("\r")
    if "\x00" in first_line:  # `---` in UTF-16, as Windows editors save "Unicode": a NUL beside each character
        return "it is not UTF-8 text (its first line holds NUL bytes, as UTF-16 does); save it as UTF-8"
    if text.startswith("\ufeff"):
        return "it starts with a byte order mark; save it as UTF-8 without one"
    if first_line == "---":
        return 'the "---" line must end with a line break'
    if first_line.startswith("---") and not first_line.strip("- \t"):
        return 'its first line must be exactly "---", with nothing after it'
    return 'its first line must be "---", then the YAML, then a closing "---" line'


def _refuse_keys_written_alike(value: Any) -> None:
    """§4.5 keeps every key the author wrote; `1` and `"1"` in one mapping would be one key in JSON."""
    if isinstance(value, list):
        for item in value:
            _refuse_keys_written_alike(item)
    if not isinstance(value, dict):
        return
    written: dict[str, Any] = {}
    for key, item in value.items():
        text = json_key(key)
        if text in written:
            first, second = (quoted(shown) if isinstance(shown, str) else json_key(shown) for shown in (written[text], key))
            both = f"the keys {first} and {second} in one mapping are both {quoted(text)} in JSON"
            raise FrontmatterError(_NOT_YAML + both)
        written[text] = key
        _refuse_keys_written_alike(item)


def _load_yaml(raw_yaml: str) -> Any:
    # A fresh instance per parse: ruamel leaves an instance unusable after a depth error.
    yaml = YAML(typ="safe", pure=True)
    yaml.max_depth = MAX_YAML_DEPTH
    yaml.Scanner = _RefusingScanner
    yaml.Resolver = _CoreResolver
    yaml.Constructor = _Constructor
    try:
        return yaml.load(raw_yaml)
    except MaxDepthExceededError as error:
        raise FrontmatterError(
            f"{_NOT_YAML}nesting is deeper than {MAX_YAML_DEPTH} levels"
            + _position(error.problem_mark)
        ) from None
    except MarkedYAMLError as error:
        problem = ", ".join(part for part in (error.context, error.problem) if part)
        raise FrontmatterError(
            f"{_NOT_YAML}{problem}" + _position(error.problem_mark or error.context_mark)
            + "".join(_tips(problem, raw_yaml, error.problem_mark)) + _unclosed_at(error, len(raw_yaml))
        ) from None
    except ReaderError as error:  # a control character; ruamel gives its offset in the YAML, not a mark
        raise FrontmatterError(
            f"{_NOT_YAML}{error.reason}: U+{error.character:04X}" + _offset_position(raw_yaml, error.position)
        ) from None
    except RecursionError:
        raise FrontmatterError(f"{_NOT_YAML}nesting is too deep") from None
    except (TypeError, ValueError) as error:
        # Raised bare by a constructor not wrapped above: still the author's YAML, not an unexpected failure.
        raise FrontmatterError(f"{_NOT_YAML}{error}") from None


class _RefusingScanner(Scanner):
    """Refuses anchors, aliases, directives and explicit tags as the parser takes them.

    Tokens, not text: `*` or `&` inside a plain scalar (`Run *all* tests`) is no anchor.
    """

    def get_token(self) -> Any:
        token = super().get_token()
        if isinstance(token, (AnchorToken, AliasToken)):
            sigil = "&" if isinstance(token, AnchorToken) else "*"
            used = f'an anchor or alias ("{sigil}{token.value}")'
        elif isinstance(token, DirectiveToken):
            used = f"a directive (%{token.name})"
        elif isinstance(token, TagToken):
            used = f'the tag "{_tag_text(token.value)}"'
        else:
            return token
        # `*bold* text` or `!important` as a value's first word is read as YAML syntax, not text.
        text_tip = "" if isinstance(token, DirectiveToken) else "; if it is meant as text, quote the value"
        raise FrontmatterError(
            f"SKILL.md frontmatter uses {used}, which is refused" + _position(token.start_mark) + text_tip
        )


class _CoreResolver(VersionedResolver):
    """The YAML 1.2 core schema. ruamel's 1.2 rules also resolve two YAML 1.1 types, the merge key `<<` (which drops
    the key and merges its mapping into the parent) and the value key `=` (which no safe constructor builds), and
    read `0b101`, `1_000` and `1_0.5` as numbers: under the core schema all of these are strings."""

    def add_version_implicit_resolver(self, version: Any, tag: Any, regexp: Any, first: Any) -> None:
        if tag not in _NOT_IN_CORE_SCHEMA:
            super().add_version_implicit_resolver(version, tag, _CORE_NUMBERS.get(tag, regexp), first)


_NOT_IN_CORE_SCHEMA = ("tag:yaml.org,2002:merge", "tag:yaml.org,2002:value")
# YAML 1.2.2 §10.3.2; a float needs a point or an exponent here, since ruamel tries floats before integers.
_CORE_NUMBERS = {
    "tag:yaml.org,2002:int": re.compile(r"(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)\Z"),
    "tag:yaml.org,2002:float": re.compile(
        r"(?:[-+]?(?:\.[0-9]+|[0-9]+\.[0-9]*)(?:[eE][-+]?[0-9]+)?|[-+]?[0-9]+[eE][-+]?[0-9]+"
        r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))\Z"
    ),
}


class _Constructor(SafeConstructor):
    def construct_yaml_int(self, node: Any) -> int:
        # Python writes at most 4300 decimal digits; a longer hex integer would break every JSON echo.
        try:
            value = super().construct_yaml_int(node)
            repr(value)
        except ValueError:
            raise ConstructorError(None, None, "the integer is too large", node.start_mark) from None
        return value

    def construct_yaml_str(self, node: Any) -> str:
        # `"\ud83d\ude00"` (JSON-style escapes of one character) loads as two surrogates: join them. A lone one
        # cannot be written as UTF-8, so it would break every answer carrying this skill.
        value = super().construct_yaml_str(node)
        if _SURROGATE.search(value):
            try:
                value = value.encode("utf-16", "surrogatepass").decode("utf-16")
            except UnicodeDecodeError:
                problem = "a \\u escape gives a lone surrogate, which is not a character"
                raise ConstructorError(None, None, problem, node.start_mark) from None
        return value

    def construct_yaml_timestamp(self, node: Any, values: Any = None) -> Any:
        # An impossible date (2024-02-30) is a bare ValueError from datetime: given the line it is on.
        try:
            return super().construct_yaml_timestamp(node, values)
        except ValueError as error:
            raise ConstructorError(None, None, str(error), node.start_mark) from None

    def check_mapping_key(self, node: Any, key_node: Any, mapping: Any, key: Any, value: Any) -> bool:
        # ruamel's own message quotes both values (file contents, which no log may carry), and Python's 1 == true
        # makes two keys collide that YAML and JSON keep apart.
        try:
            hash(key)
        except TypeError:  # a list inside a list key: ruamel makes the outer one a tuple, which still cannot hash
            raise ConstructorError("while constructing a mapping", node.start_mark, "found unhashable key",
                                   key_node.start_mark) from None
        if key not in mapping:
            return True
        earlier = next(each for each in mapping if each is key or each == key)  # NaN: the same object, never equal
        if type(earlier) is type(key):
            problem = f"found duplicate key {quoted(json_key(key))}"
        else:
            problem = f"the keys {json_key(earlier)} and {json_key(key)} are one key to this parser; rename one"
        raise ConstructorError("while constructing a mapping", node.start_mark, problem, key_node.start_mark)


_Constructor.add_constructor("tag:yaml.org,2002:int", _Constructor.construct_yaml_int)
_Constructor.add_constructor("tag:yaml.org,2002:str", _Constructor.construct_yaml_str)
_Constructor.add_constructor("tag:yaml.org,2002:timestamp", _Constructor.construct_yaml_timestamp)


def _tips(problem: str, raw_yaml: str, mark: Any) -> list[str]:
    """How to fix the slips authors make most, from the parser's words (and, for a value closed early, the line)."""
    tips = [tip for slip, tip in _YAML_TIPS.items() if slip in problem]
    if reserved := _RESERVED_START.search(problem):
        tips.append(f'; quote a value that begins with "{reserved[1]}"')
    # `{{ name }}`, as template skills write a placeholder: a mapping whose key is a mapping
    if "found unhashable key" in problem and mark is not None and raw_yaml.startswith("{", mark.index):
        tips.append('; a value that begins with "{" is read as a mapping: quote it if it is text')
    if _LEFT_OVER in problem and mark is not None:
        before = raw_yaml[raw_yaml.rfind("\n", 0, mark.index) + 1 : mark.index].rstrip()
        if before.endswith(("'", '"', "]", "}")):
            tips.append(_CLOSED_EARLY_TIP)
    return tips


def _tag_text(value: tuple[str | None, str]) -> str:
    handle, suffix = value
    if handle is not None:
        return handle + suffix
    return suffix if suffix == "!" else f"!<{suffix}>"


def _position(mark: Any) -> str:
    if mark is None:
        return ""
    return f" (line {mark.line + _FIRST_YAML_LINE}, column {mark.column + 1})"


def _unclosed_at(error: MarkedYAMLError, end: int) -> str:
    """Where a quote or bracket the block ends inside was opened: the error's own position is the closing "---"."""
    mark, opened = error.context_mark, _READING.fullmatch(error.context or "")
    if mark is None or opened is None or error.problem_mark is None or error.problem_mark.index < end:
        return ""
    where = f"line {mark.line + _FIRST_YAML_LINE}, column {mark.column + 1}"
    return f"; the {opened[1]} that begins at {where} is never closed"


def _offset_position(text: str, offset: int) -> str:
    line_start = text.rfind("\n", 0, offset) + 1
    return f" (line {text.count(chr(10), 0, offset) + _FIRST_YAML_LINE}, column {offset - line_start + 1})"


def frontmatter_name(frontmatter: dict[Any, Any]) -> str | None:
    """The name the frontmatter claims; a skill is served under its directory's name (R1), which may differ."""
    return string_field(frontmatter, "name")


def description(frontmatter: dict[Any, Any]) -> str | None:
    return string_field(frontmatter, "description")


def when_to_use(frontmatter: dict[Any, Any]) -> str | None:
    """`when-to-use` if it is a string, else `when_to_use` if it is a string (§3.4)."""
    hyphenated = string_field(frontmatter, "when-to-use")
    return hyphenated if hyphenated is not None else string_field(frontmatter, "when_to_use")


def string_field(mapping: dict[Any, Any], key: str) -> str | None:
    """A field that counts only as a string: any other value is as good as absent."""
    value = mapping.get(key)
    return value if isinstance(value, str) else None


def frontmatter_to_json(value: Any) -> Any:
    """The parsed frontmatter as JSON-able data: dates as ISO 8601, non-finite floats as YAML text (§4.5)."""
    if isinstance(value, dict):
        return {json_key(key): frontmatter_to_json(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [frontmatter_to_json(item) for item in value]
    if isinstance(value, (datetime.date, datetime.datetime)):
        return value.isoformat()
    if isinstance(value, float) and not math.isfinite(value):
        return ".nan" if math.isnan(value) else (".inf" if value > 0 else "-.inf")
    return value


def json_key(key: Any) -> str:
    """A mapping key as JSON object text: strings unchanged, anything else as its JSON text (`1` → "1")."""
    converted = frontmatter_to_json(key)
    if isinstance(converted, str):
        return converted
    return json.dumps(converted, ensure_ascii=False, separators=(",", ":"))
