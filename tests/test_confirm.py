import base64
import hashlib
import hmac
import json
import os
import stat

import pytest
from hypothesis import given
from hypothesis import strategies as st

from skill_mcp.confirm import (
    DRAFT_CHANGED,
    TOKEN_EXPIRED,
    TOKEN_INVALID,
    TOKEN_REUSED,
    Approval,
    choose_path,
    confirm_key,
    confirmation_required,
    confirmation_unsupported,
    declares_form_elicitation,
    draft_changed,
    elicitation_question,
    expires_at,
    issue_token,
    make_spent_store,
    not_confirmed,
    open_state,
    payload_hash,
    preview_body,
    rejection,
    seal_state,
    token_offer,
    verify_token,
)
from skill_mcp.spent import FileSpentStore, MemorySpentStore, SpentStoreError

# Expected strings below were computed independently with openssl and basenc.
KEY = bytes.fromhex("7e35aaaea6b83ab43c9271737060ce485dc285837d9b4b98b6458408886ac7b1")  # sha256("sekrit")
NONCE = bytes(range(16))
NONCE_TEXT = "AAECAwQFBgcICQoLDA0ODw"
NOW = 1700000000000
TTL = 600
TARGET = "demo/scripts/x.py"
EXPECTED_TOKEN = (
    "skmcp.token.v1.eyJleHAiOjE3MDAwMDA2MDAwMDAsImciOiJkZW1vL3NjcmlwdHMveC5weSIsImgiOiJIQVNIIiwibiI6IkFBRUNBd1FGQmdj"
    "SUNRb0xEQTBPRHciLCJ0Ijoic2tpbGxfcnVuIn0.se1GdyKIVNTrEERoZsf5voQIgeDnx4dYIwnt1_1tzs8"
)
EXPECTED_STATE = (
    "skmcp.state.v1.eyJhIjoic2tpbGwucnVuIiwiZXhwIjoxNzAwMDAwNjAwMDAwLCJnIjoiZGVtby9zY3JpcHRzL3gucHkiLCJoIjoiSEFTSCIs"
    "Im4iOiJBQUVDQXdRRkJnY0lDUW9MREEwT0R3In0.gqVzbYWVJEw7tLr1tHMZzRg8JPXCw4Kfx8LWVFtZ38o"
)
WILL_RUN = {"skill": "demo", "interpreter": "python3", "argv": ["scripts/x.py", "ü"], "cwd": "/skills/demo",
            "timeoutMs": 60000, "scriptSha256": "ab" * 32, "envNames": ["HOME", "PATH"]}


def token(now_ms=NOW, ttl_s=TTL, target=TARGET, digest="HASH", nonce=NONCE, key=KEY):
    return issue_token(key, target, digest, now_ms, ttl_s, nonce)[0]


def state(now_ms=NOW, ttl_s=TTL, target=TARGET, digest="HASH", nonce=NONCE, key=KEY):
    return seal_state(key, target, digest, now_ms, ttl_s, nonce)[0]


def verify(sealed, target=TARGET, digest="HASH", now_ms=NOW, spent=None, key=KEY):
    return verify_token(key, sealed, target, digest, now_ms, spent or MemorySpentStore())


def open_(sealed, target=TARGET, digest="HASH", now_ms=NOW, spent=None, key=KEY):
    return open_state(key, sealed, target, digest, now_ms, spent or MemorySpentStore())


def spent_store_with_nonce():
    store = MemorySpentStore()
    store.spend(NONCE_TEXT, NOW + TTL * 1000, NOW)
    return store


# --- payload hash and key ----------------------------------------------------------------------


def test_payload_hash_is_base64url_sha256_of_canonical_json():
    assert payload_hash({"skill": "demo", "argv": ["scripts/x.py", "ü"]}) == "5vtttAWycMaITI4fUydI6o05_Svw9DIDSh2MlI0lyxM"


def test_payload_hash_ignores_key_order_but_not_values():
    assert payload_hash({"a": 1, "b": 2}) == payload_hash({"b": 2, "a": 1})
    assert payload_hash({"a": 1}) != payload_hash({"a": 2})


def test_key_from_confirm_secret_wins_and_is_stable():
    assert confirm_key("sekrit", "host", "/data", random_bytes=pytest.fail) == KEY


def test_host_secret_needs_an_absolute_data_dir():
    assert confirm_key(None, "sekrit", "/data", random_bytes=pytest.fail) == KEY
    assert confirm_key(None, "sekrit", "data", random_bytes=lambda n: b"r" * n) == b"r" * 32
    assert confirm_key(None, "sekrit", None, random_bytes=lambda n: b"r" * n) == b"r" * 32


def test_a_secret_that_is_not_utf8_keys_by_its_own_bytes():
    # The environment hands Python such a value as lone surrogates; before, encoding it crashed the boot.
    raw = b"ab\xffcd"
    expected = hashlib.sha256(raw).digest()
    assert confirm_key(os.fsdecode(raw), None, None, random_bytes=pytest.fail) == expected
    assert confirm_key(None, os.fsdecode(raw), "/data", random_bytes=pytest.fail) == expected


def test_a_lone_surrogate_in_the_payload_is_hashed_not_refused():
    assert payload_hash({"cwd": "/r\udcffoot"}) != payload_hash({"cwd": "/r\udcfeoot"})


def test_no_secret_gives_a_random_unstable_key():
    assert confirm_key(None, None, "/data", random_bytes=lambda n: b"r" * n) == b"r" * 32


# --- tokens ------------------------------------------------------------------------------------


def test_issue_token_exact_value_and_expiry():
    assert issue_token(KEY, TARGET, "HASH", NOW, TTL, NONCE) == (EXPECTED_TOKEN, NOW + 600000)


def test_token_round_trip_gives_the_approval_to_spend():
    verdict = verify(EXPECTED_TOKEN)
    assert verdict.ok and verdict.error is None
    assert verdict.approval == Approval(NONCE_TEXT, NOW + 600000)


def test_issue_token_refuses_a_nonce_of_the_wrong_size():
    with pytest.raises(ValueError):
        issue_token(KEY, TARGET, "HASH", NOW, TTL, b"short")


@pytest.mark.parametrize(
    "sealed",
    [
        "",
        "skmcp.token.v1.",
        "skmcp.token.v2." + EXPECTED_TOKEN.removeprefix("skmcp.token.v1."),
        EXPECTED_TOKEN.rpartition(".")[0],
        EXPECTED_TOKEN + ".extra",
        EXPECTED_TOKEN[:-1] + ("A" if EXPECTED_TOKEN[-1] != "A" else "B"),
        EXPECTED_TOKEN + "é",
    ],
)
def test_malformed_or_forged_token_is_invalid(sealed):
    assert verify(sealed).error == TOKEN_INVALID


def test_token_from_a_previous_process_random_key_is_invalid():
    previous = token(key=os.urandom(32))
    assert verify(previous, key=os.urandom(32)).error == TOKEN_INVALID


def _b64url(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def test_token_with_authentic_mac_but_bad_claims_is_invalid():
    def forged(claims):
        body = _b64url(json.dumps(claims).encode())
        mac = hmac.new(KEY, f"skmcp.token.v1.{body}".encode(), hashlib.sha256).digest()
        return f"skmcp.token.v1.{body}.{_b64url(mac)}"

    good = {"t": "skill_run", "g": TARGET, "h": "HASH", "exp": NOW + 1000, "n": NONCE_TEXT}
    assert verify(forged(good)).ok
    for bad in ({**good, "t": "other"}, {**good, "exp": "soon"}, {**good, "exp": True}, {**good, "n": "../x"},
                {**good, "extra": 1}, {k: v for k, v in good.items() if k != "h"},
                {**good, "h": 1}):  # a hash that is no string is a bad claim, not a changed draft
        assert verify(forged(bad)).error == TOKEN_INVALID, bad


def test_a_second_spelling_of_the_same_mac_bytes_is_invalid():
    # The MAC's last base64url character carries 2 spare bits: only the canonical text may pass, not the three
    # other spellings that decode to the same bytes, so a token or state has exactly one accepted form.
    assert EXPECTED_TOKEN.endswith("8") and EXPECTED_STATE.endswith("o")
    for spare in "9-_":
        assert verify(EXPECTED_TOKEN[:-1] + spare).error == TOKEN_INVALID
    for spare in "pqr":
        assert open_(EXPECTED_STATE[:-1] + spare) is None


def test_other_target_is_invalid_even_when_expired_and_reused():
    assert verify(token(target="demo/scripts/y.py")).error == TOKEN_INVALID
    late = NOW + TTL * 1000 + 1
    assert verify(token(target="other/scripts/x.py"), now_ms=late, spent=spent_store_with_nonce()).error == TOKEN_INVALID


def test_spent_nonce_is_reused_even_when_expired_and_changed():
    late = NOW + TTL * 1000 + 1
    assert verify(EXPECTED_TOKEN, digest="OTHER", now_ms=late, spent=spent_store_with_nonce()).error == TOKEN_REUSED


def test_expiry_comes_before_payload_change():
    assert verify(EXPECTED_TOKEN, digest="OTHER", now_ms=NOW + TTL * 1000).error == TOKEN_EXPIRED
    assert verify(EXPECTED_TOKEN, now_ms=NOW + TTL * 1000 - 1).ok


def test_changed_payload_is_draft_changed():
    assert verify(EXPECTED_TOKEN, digest="OTHER").error == DRAFT_CHANGED


def test_a_spent_token_is_reused_on_its_second_presentation():
    store = MemorySpentStore()
    approval = verify(EXPECTED_TOKEN, spent=store).approval
    assert store.spend(approval.nonce, approval.expires_ms, NOW)
    assert verify(EXPECTED_TOKEN, spent=store).error == TOKEN_REUSED


# --- request state -----------------------------------------------------------------------------


def test_seal_state_exact_value_and_round_trip():
    assert seal_state(KEY, TARGET, "HASH", NOW, TTL, NONCE) == (EXPECTED_STATE, NOW + 600000)
    assert open_(EXPECTED_STATE) == Approval(NONCE_TEXT, NOW + 600000)


@pytest.mark.parametrize(
    "change",
    [
        lambda: {"target": "demo/scripts/y.py"},
        lambda: {"digest": "OTHER"},
        lambda: {"now_ms": NOW + TTL * 1000},
        lambda: {"spent": spent_store_with_nonce()},
        lambda: {"key": bytes(32)},
    ],
    ids=["target", "payload", "expired", "spent", "key"],
)
def test_state_failing_any_check_opens_to_none(change):
    assert open_(EXPECTED_STATE, **change()) is None


def test_token_and_state_cannot_stand_in_for_each_other():
    assert open_(EXPECTED_TOKEN) is None
    assert verify(EXPECTED_STATE).error == TOKEN_INVALID
    # Same body and MAC under the other prefix: the prefix is inside the MAC, so it fails there.
    assert open_("skmcp.state.v1." + EXPECTED_TOKEN.removeprefix("skmcp.token.v1.")) is None
    assert verify("skmcp.token.v1." + EXPECTED_STATE.removeprefix("skmcp.state.v1.")).error == TOKEN_INVALID


def _tamperings(text):
    index = st.integers(min_value=0, max_value=len(text) - 1)
    replacement = st.characters(codec="utf-8")
    substituted = st.tuples(index, replacement).filter(lambda ic: text[ic[0]] != ic[1]).map(
        lambda ic: text[: ic[0]] + ic[1] + text[ic[0] + 1:])
    deleted = index.map(lambda i: text[:i] + text[i + 1:])
    inserted = st.tuples(st.integers(0, len(text)), replacement).map(lambda ic: text[: ic[0]] + ic[1] + text[ic[0]:])
    return st.one_of(substituted, deleted, inserted)


@given(_tamperings(EXPECTED_TOKEN))
def test_any_single_character_tampering_of_a_token_never_verifies(tampered):
    assert not verify(tampered).ok


@given(_tamperings(EXPECTED_STATE))
def test_any_single_character_tampering_of_a_state_never_opens(tampered):
    assert open_(tampered) is None


# --- spent stores ------------------------------------------------------------------------------


def test_memory_store_spends_once_and_prunes_expired_records():
    store = MemorySpentStore()
    assert store.spend("AAAAAAAAAAAAAAAAAAAAAA", NOW + 10, NOW)
    assert not store.spend("AAAAAAAAAAAAAAAAAAAAAA", NOW + 10, NOW)
    assert store.is_spent("AAAAAAAAAAAAAAAAAAAAAA")
    assert store.spend("BBBBBBBBBBBBBBBBBBBBBB", NOW + 100, NOW + 10)
    assert not store.is_spent("AAAAAAAAAAAAAAAAAAAAAA")


def test_file_store_survives_a_restart_and_stays_single_use(tmp_path):
    first = FileSpentStore(str(tmp_path))
    approval = verify(EXPECTED_TOKEN, spent=first).approval
    assert first.spend(approval.nonce, approval.expires_ms, NOW)

    after_restart = FileSpentStore(str(tmp_path))
    assert verify(EXPECTED_TOKEN, spent=after_restart).error == TOKEN_REUSED
    assert not after_restart.spend(approval.nonce, approval.expires_ms, NOW)


def test_file_store_layout_and_modes(tmp_path):
    store = FileSpentStore(str(tmp_path))
    assert store.spend(NONCE_TEXT, NOW + 600000, NOW)
    spent_dir = tmp_path / ".mcp-confirm" / "spent"
    assert stat.S_IMODE(spent_dir.stat().st_mode) == 0o700
    assert (spent_dir / NONCE_TEXT).read_text() == str(NOW + 600000)


def test_the_file_store_is_private_whatever_the_umask(tmp_path):
    # Under umask 000, makedirs left `.mcp-confirm` open: another uid could move `spent` away and replay a token.
    # The record is the spend itself: created 0600, not widened either.
    previous = os.umask(0)
    try:
        assert FileSpentStore(str(tmp_path)).spend(NONCE_TEXT, NOW + 600000, NOW)
    finally:
        os.umask(previous)
    for directory in (tmp_path / ".mcp-confirm", tmp_path / ".mcp-confirm" / "spent"):
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700, directory
    assert stat.S_IMODE((tmp_path / ".mcp-confirm" / "spent" / NONCE_TEXT).lstat().st_mode) == 0o600


def test_the_file_store_creates_only_its_own_directories_never_a_missing_data_dir(tmp_path):
    # A mistyped MCP_DATA_DIR (as root, anywhere) is not created: the spend fails closed and says where.
    store = FileSpentStore(str(tmp_path / "missing" / "data"))
    with pytest.raises(SpentStoreError, match=r"cannot record a spent approval in .*/missing/data/\.mcp-confirm/spent: "):
        store.spend(NONCE_TEXT, NOW + 600000, NOW)
    assert os.listdir(tmp_path) == []


def test_any_entry_at_the_nonce_counts_as_spent_even_a_dangling_link(tmp_path):
    # spend() cannot create a record where any entry already is (O_EXCL), so is_spent must agree and say
    # TOKEN_REUSED at verification, rather than pass a token whose spend is then bound to fail.
    store = FileSpentStore(str(tmp_path))
    os.makedirs(store.directory)
    os.symlink(tmp_path / "nowhere", os.path.join(store.directory, NONCE_TEXT))
    assert verify(EXPECTED_TOKEN, spent=store).error == TOKEN_REUSED
    assert not store.spend(NONCE_TEXT, NOW + 600000, NOW)


def test_file_store_prunes_expired_records_on_spend(tmp_path):
    store = FileSpentStore(str(tmp_path))
    store.spend("AAAAAAAAAAAAAAAAAAAAAA", NOW + 10, NOW)
    store.spend("BBBBBBBBBBBBBBBBBBBBBB", NOW + 100, NOW)
    store.spend("CCCCCCCCCCCCCCCCCCCCCC", NOW + 100, NOW + 10)
    assert sorted(os.listdir(store.directory)) == ["BBBBBBBBBBBBBBBBBBBBBB", "CCCCCCCCCCCCCCCCCCCCCC"]


def test_pruning_skips_what_is_not_a_record_without_blocking(tmp_path):
    # A script of the server's uid can write the store: a FIFO there used to block the server for good.
    import threading

    store = FileSpentStore(str(tmp_path))
    store.spend("AAAAAAAAAAAAAAAAAAAAAA", NOW + 10, NOW)
    os.mkfifo(os.path.join(store.directory, "BBBBBBBBBBBBBBBBBBBBBB"))
    expired_elsewhere = tmp_path / "elsewhere"
    expired_elsewhere.write_text("1")  # read through the link, it would look expired, and the link be pruned
    os.symlink(expired_elsewhere, os.path.join(store.directory, "CCCCCCCCCCCCCCCCCCCCCC"))
    spent = []
    worker = threading.Thread(target=lambda: spent.append(store.spend(NONCE_TEXT, NOW + 600000, NOW + 20)), daemon=True)
    worker.start()
    worker.join(timeout=5)
    assert spent == [True]
    assert sorted(os.listdir(store.directory)) == sorted([NONCE_TEXT, "BBBBBBBBBBBBBBBBBBBBBB", "CCCCCCCCCCCCCCCCCCCCCC"])


@pytest.mark.parametrize("nonce", ["../../etc/passwd", "", ".", "AAECAwQFBgcICQoLDA0OD/", "A" * 23, "A" * 21 + "."])
def test_file_store_refuses_a_nonce_that_is_not_a_plain_name(tmp_path, nonce):
    store = FileSpentStore(str(tmp_path))
    with pytest.raises(ValueError):
        store.spend(nonce, NOW + 1, NOW)
    with pytest.raises(ValueError):
        store.is_spent(nonce)


@pytest.mark.parametrize("blocker", [".mcp-confirm", ".mcp-confirm/spent"])
def test_unwritable_file_store_raises(tmp_path, blocker):
    # A file where a directory must be: fails even as root, unlike a permission bit.
    (tmp_path / blocker).parent.mkdir(exist_ok=True)
    (tmp_path / blocker).write_text("in the way")
    with pytest.raises(SpentStoreError):
        FileSpentStore(str(tmp_path)).spend(NONCE_TEXT, NOW + 1, NOW)


def test_make_spent_store_needs_a_stable_key_and_an_absolute_dir(tmp_path):
    data_dir = str(tmp_path)
    assert make_spent_store("sekrit", None, data_dir).directory == os.path.join(data_dir, ".mcp-confirm", "spent")
    assert isinstance(make_spent_store(None, "host", data_dir), FileSpentStore)
    assert isinstance(make_spent_store(None, None, data_dir), MemorySpentStore)
    assert isinstance(make_spent_store("sekrit", "host", "relative/dir"), MemorySpentStore)
    assert isinstance(make_spent_store("sekrit", None, None), MemorySpentStore)


# --- path choice -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("capabilities", "declares"),
    [
        ({"elicitation": {}}, True),
        ({"elicitation": {"form": {}}}, True),
        ({"elicitation": {"form": {}, "url": {}}}, True),
        ({"elicitation": {"form": None, "url": None}}, True),
        ({"elicitation": {"url": {}}}, False),
        ({"elicitation": {"url": {}, "form": None}}, False),
        ({"elicitation": None}, False),
        ({"sampling": {}}, False),
        ({}, False),
        (None, False),
    ],
)
def test_declares_form_elicitation(capabilities, declares):
    assert declares_form_elicitation(capabilities) is declares


@pytest.mark.parametrize(
    ("modern", "declares", "on", "path"),
    [
        (False, True, True, "elicitation"),
        (True, True, True, "input-required"),
        (False, False, True, "token"),
        (True, False, True, "token"),
        (False, True, False, "token"),
        (True, True, False, "token"),
        (True, False, False, "token"),
    ],
)
def test_choose_path(modern, declares, on, path):
    assert choose_path(modern, declares, on) == path


# --- bodies ------------------------------------------------------------------------------------


def test_preview():
    body = preview_body(WILL_RUN)
    assert list(body) == ["dryRun", "willRun", "note"]
    assert body["dryRun"] is True and body["willRun"] == WILL_RUN
    note = body["note"].lower()
    assert "no process has been started" in note
    assert "only after confirmation" in note
    assert "cannot tell what a script does" in note and "which script runs and what it is handed" in note


def test_expires_at_is_iso_utc_with_milliseconds():
    assert expires_at(NOW + 600000) == "2023-11-14T22:23:20.000Z"
    assert expires_at(NOW + 600042) == "2023-11-14T22:23:20.042Z"


def test_confirmation_required_ask_user():
    body = confirmation_required(WILL_RUN, EXPECTED_TOKEN, NOW + 600000, 600, "ask-user")
    instruction = body.pop("instruction").lower()
    assert body == {"status": "confirmation-required", "confirmed": False, "dispatched": False,
                    "action": "skill.run", "preview": preview_body(WILL_RUN), "confirmToken": EXPECTED_TOKEN,
                    "expiresAt": "2023-11-14T22:23:20.000Z", "ttlSeconds": 600}
    assert "verbatim" in instruction and "explicitly approve" in instruction and "confirmtoken" in instruction


def test_confirmation_required_auto():
    instruction = confirmation_required(WILL_RUN, EXPECTED_TOKEN, NOW, 600, "auto")["instruction"].lower()
    assert "not required" in instruction and "same arguments plus confirmtoken" in instruction


@pytest.mark.parametrize(
    ("cause", "why"),
    [
        ("no-elicitation", "declares no mcp elicitation capability"),
        ("elicitation-off", "mcp_confirm_elicitation=off"),
        ("ttl-invalid", "mcp_confirm_ttl_seconds"),
    ],
)
def test_confirmation_unsupported(cause, why):
    body = confirmation_unsupported(cause)
    note = body.pop("note").lower()
    assert body == {"confirmed": False, "dispatched": False, "action": "skill.run",
                    "reason": "confirmation-unsupported"}
    assert "nothing was done" in note and why in note
    assert "never taken without a confirmation" in note and "mcp_confirm_mode=ask-user" in note
    # an invalid TTL is what to fix first; the mode alone would not allow two-step confirmation
    assert note.count("mcp_confirm_ttl_seconds") == (2 if cause == "ttl-invalid" else 0)


@pytest.mark.parametrize(
    ("error", "says"),
    [
        (TOKEN_REUSED, "already used"),
        (TOKEN_EXPIRED, "without confirmtoken for a fresh preview"),
        (TOKEN_INVALID, "without confirmtoken for a fresh preview"),
    ],
)
def test_rejection(error, says):
    body = rejection(error)
    note = body.pop("note").lower()
    assert body == {"status": "confirmation-rejected", "confirmed": False, "dispatched": False, "error": error,
                    "action": "skill.run"}
    assert "nothing was run" in note and says in note


def test_draft_changed_with_a_fresh_token():
    offer = token_offer("fresh", NOW + 600000, 600, "ask-user")
    body = draft_changed(WILL_RUN, offer)
    note = body.pop("note").lower()
    assert body == {"status": "confirmation-rejected", "confirmed": False, "dispatched": False,
                    "error": "DRAFT_CHANGED", "action": "skill.run", "reason": "payload-changed",
                    "preview": preview_body(WILL_RUN), "confirmToken": "fresh",
                    "expiresAt": "2023-11-14T22:23:20.000Z", "ttlSeconds": 600,
                    "instruction": offer["instruction"]}
    assert "nothing was run" in note and "no longer matches" in note and "fresh confirmtoken" in note


def test_draft_changed_on_the_elicitation_path_offers_no_token():
    body = draft_changed(WILL_RUN)
    assert "confirmToken" not in body and "instruction" not in body
    assert body["reason"] == "payload-changed" and body["preview"] == preview_body(WILL_RUN)
    assert "fresh" not in body["note"]


def test_not_confirmed():
    body = not_confirmed()
    note = body.pop("note").lower()
    assert body == {"confirmed": False, "cancelled": True, "action": "skill.run"}
    assert "declined" in note and "cancelled" in note and "unchecked" in note


def test_elicitation_question():
    message, schema = elicitation_question(WILL_RUN)
    head, _, pretty = message.partition("\n")
    assert head == "Review and confirm running this skill script:"
    assert json.loads(pretty) == {"action": "skill.run", "details": WILL_RUN}
    assert pretty == json.dumps({"action": "skill.run", "details": WILL_RUN}, indent=2, ensure_ascii=False)
    confirmed = schema["properties"].pop("confirmed")
    assert schema == {"type": "object", "properties": {}, "required": ["confirmed"]}
    assert confirmed.pop("title") and confirmed.pop("description")
    assert confirmed == {"type": "boolean", "default": False}
