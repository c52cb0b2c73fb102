"""The confirmation gate's core (SPEC §11): payload hash, key, tokens and request states, where spent ones are
kept (spent.py keeps them), the path choice and every body the gate answers with. Clock, secret and randomness
come in as arguments.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal, TypeGuard

from .config import CONFIRM_MODES, TTL_MAX_SECONDS
from .spent import NONCE_PATTERN, FileSpentStore, MemorySpentStore, SpentStore, is_expired
from .text import encodable, json_for_people

ACTION = "skill.run"

TOKEN_INVALID = "TOKEN_INVALID"
TOKEN_REUSED = "TOKEN_REUSED"
TOKEN_EXPIRED = "TOKEN_EXPIRED"
DRAFT_CHANGED = "DRAFT_CHANGED"

NONCE_BYTES = 16

ConfirmPath = Literal["elicitation", "input-required", "token"]
Mode = Literal["ask-user", "auto"]
UnsupportedCause = Literal["no-elicitation", "elicitation-off", "ttl-invalid", "mode-unknown"]


def canonical_json(value: Any) -> bytes:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return text.encode("utf-8", "surrogatepass")  # a lone surrogate is hashed as such, not a failed call


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _b64url_decode(text: str) -> bytes:
    return base64.b64decode(text + "=" * (-len(text) % 4), altchars=b"-_", validate=True)


def payload_hash(will_run: dict[str, Any]) -> str:
    return _b64url(hashlib.sha256(canonical_json(will_run)).digest())


def confirm_key(
    secret: str | None,
    host_secret: str | None,
    data_dir: str | None,
    random_bytes: Callable[[int], bytes] = os.urandom,
) -> bytes:
    """The token key (SPEC §11.6); arguments are already through the unset rule (None = unset)."""
    if secret is not None:
        return _stable_key(secret)
    if host_secret is not None and _is_absolute(data_dir):
        return _stable_key(host_secret)
    return random_bytes(32)


def _stable_key(secret: str) -> bytes:
    # The variable's own bytes: one that is not UTF-8 (random bytes) reached Python as lone surrogates.
    return hashlib.sha256(secret.encode("utf-8", "surrogateescape")).digest()


def _is_absolute(data_dir: str | None) -> TypeGuard[str]:
    return data_dir is not None and os.path.isabs(data_dir)


# --- sealing -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Envelope:
    prefix: str
    kind_claim: str
    kind_value: str


_TOKEN = _Envelope("skmcp.token.v1.", "t", "skill_run")
_STATE = _Envelope("skmcp.state.v1.", "a", ACTION)


@dataclass(frozen=True, slots=True)
class Approval:
    """A verified approval, spent (nonce until expires_ms) only once the run lock is held."""

    nonce: str
    expires_ms: int


@dataclass(frozen=True, slots=True)
class Verdict:
    """A token check's answer: an approval, or one §11.5 error code."""

    approval: Approval | None
    error: str | None

    @property
    def ok(self) -> bool:
        return self.error is None


def _mac(envelope: _Envelope, key: bytes, body: str) -> str:
    return _b64url(hmac.new(key, (envelope.prefix + body).encode("ascii"), hashlib.sha256).digest())


def _seal(
    envelope: _Envelope, key: bytes, target: str, payload_hash: str, now_ms: int, ttl_s: int, nonce: bytes
) -> tuple[str, int]:
    if len(nonce) != NONCE_BYTES:
        raise ValueError(f"a nonce is {NONCE_BYTES} bytes, got {len(nonce)}")
    expires_ms = now_ms + ttl_s * 1000
    claims = {envelope.kind_claim: envelope.kind_value, "g": target, "h": payload_hash,
              "exp": expires_ms, "n": _b64url(nonce)}
    body = _b64url(canonical_json(claims))
    return f"{envelope.prefix}{body}.{_mac(envelope, key, body)}", expires_ms


def _open(envelope: _Envelope, key: bytes, sealed: str) -> dict[str, Any] | None:
    """The claims of a well-formed, authentic seal of this kind; None for anything else."""
    if not sealed.isascii() or not sealed.startswith(envelope.prefix):
        return None
    body, dot, mac = sealed[len(envelope.prefix):].partition(".")
    # Compare the canonical text, not decoded bytes: a MAC's spare low bits must not admit a second spelling.
    if not dot or not hmac.compare_digest(_mac(envelope, key, body).encode(), mac.encode()):
        return None
    try:
        claims = json.loads(_b64url_decode(body))
    except ValueError:
        return None
    well_formed = (
        isinstance(claims, dict)
        and claims.keys() == {envelope.kind_claim, "g", "h", "exp", "n"}
        and claims[envelope.kind_claim] == envelope.kind_value
        and isinstance(claims["g"], str)
        and isinstance(claims["h"], str)
        and type(claims["exp"]) is int
        and isinstance(claims["n"], str)
        and NONCE_PATTERN.fullmatch(claims["n"]) is not None
    )
    return claims if well_formed else None


def _verify(
    envelope: _Envelope, key: bytes, sealed: str, target: str, payload_hash: str, now_ms: int, spent: SpentStore
) -> Verdict:
    claims = _open(envelope, key, sealed)
    if claims is None or claims["g"] != target:
        return Verdict(None, TOKEN_INVALID)
    if spent.is_spent(claims["n"]):
        return Verdict(None, TOKEN_REUSED)
    if is_expired(claims["exp"], now_ms):
        return Verdict(None, TOKEN_EXPIRED)
    if claims["h"] != payload_hash:
        return Verdict(None, DRAFT_CHANGED)
    return Verdict(Approval(claims["n"], claims["exp"]), None)


def issue_token(
    key: bytes, target: str, payload_hash: str, now_ms: int, ttl_s: int, nonce: bytes
) -> tuple[str, int]:
    """A path-3 confirmToken for `<skill>/<script>` and its expiry in ms since the epoch."""
    return _seal(_TOKEN, key, target, payload_hash, now_ms, ttl_s, nonce)


def verify_token(
    key: bytes, token: str, target: str, payload_hash: str, now_ms: int, spent: SpentStore
) -> Verdict:
    """Checks in the §11.5 order; the approval is not spent here."""
    return _verify(_TOKEN, key, token, target, payload_hash, now_ms, spent)


def seal_state(
    key: bytes, target: str, payload_hash: str, now_ms: int, ttl_s: int, nonce: bytes
) -> tuple[str, int]:
    """A path-2 requestState and its expiry in ms since the epoch."""
    return _seal(_STATE, key, target, payload_hash, now_ms, ttl_s, nonce)


def open_state(
    key: bytes, state: str, target: str, payload_hash: str, now_ms: int, spent: SpentStore
) -> Approval | None:
    """The approval a valid state carries; None for any failure, since path 2 simply asks again."""
    return _verify(_STATE, key, state, target, payload_hash, now_ms, spent).approval


def spent_dir(secret: str | None, host_secret: str | None, data_dir: str | None) -> str | None:
    """Where spent approvals are kept on disk (§11.6), or None for memory: a stable key is needed (a random one
    voids old tokens anyway), and an absolute directory (a relative one is not a place)."""
    stable_key = secret is not None or host_secret is not None
    return data_dir if stable_key and _is_absolute(data_dir) else None


def make_spent_store(secret: str | None, host_secret: str | None, data_dir: str | None) -> SpentStore:
    directory = spent_dir(secret, host_secret, data_dir)
    return FileSpentStore(directory) if directory is not None else MemorySpentStore()


# --- choosing the path -------------------------------------------------------------------------


def declares_form_elicitation(capabilities: dict[str, Any] | None) -> bool:
    """`elicitation` that is `{}` or has `form`; None-valued keys count as absent (model dumps)."""
    elicitation = (capabilities or {}).get("elicitation")
    if not isinstance(elicitation, dict):
        return False
    modes = {name for name, value in elicitation.items() if value is not None}
    return not modes or "form" in modes


def choose_path(era_is_modern: bool, client_declares_form_elicitation: bool, elicitation_on: bool) -> ConfirmPath:
    if not (client_declares_form_elicitation and elicitation_on):
        return "token"
    return "input-required" if era_is_modern else "elicitation"


# --- bodies ------------------------------------------------------------------------------------

_PREVIEW_NOTE = (
    "No process has been started. This script runs only after confirmation. "
    "This server cannot tell what a script does: it decides only which script runs and what it is handed."
)

_INSTRUCTIONS: dict[str, str] = {
    "ask-user": (
        "Show this preview to the user verbatim and proceed only after they explicitly approve it in chat; "
        "then call skill_run again with the same arguments plus confirmToken."
    ),
    "auto": (
        "User approval is not required on this server: "
        "call skill_run again with the same arguments plus confirmToken to run it."
    ),
}

_UNSUPPORTED_WHY: dict[str, str] = {
    "no-elicitation": "the client declares no MCP elicitation capability",
    "elicitation-off": "elicitation is disabled by MCP_CONFIRM_ELICITATION=off",
    "ttl-invalid": "MCP_CONFIRM_TTL_SECONDS is invalid "
    f"(it must be a whole number of seconds from 1 to {TTL_MAX_SECONDS}, written without a leading zero)",
    "mode-unknown": f"MCP_CONFIRM_MODE is not a known mode ({', '.join(CONFIRM_MODES[:-1])} or {CONFIRM_MODES[-1]}), "
    "so it counts as refuse",
}

_REJECTION_NOTES: dict[str, str] = {
    TOKEN_REUSED: "Nothing was run by this call: the token was already used, and one approval runs once.",
    TOKEN_EXPIRED: "Nothing was run: the token has expired. Call again without confirmToken for a fresh preview.",
    TOKEN_INVALID: "Nothing was run: the token is not valid for this call (it names another skill or script, was altered, or "
    "comes from before the server restarted, which voids every token unless a stable key is set: MCP_CONFIRM_SECRET, or "
    "MCP_HOST_CONFIRM_SECRET with an absolute MCP_DATA_DIR). "
    "Call again without confirmToken for a fresh preview.",
}


def preview_body(will_run: dict[str, Any]) -> dict[str, Any]:
    return {"dryRun": True, "willRun": will_run, "note": _PREVIEW_NOTE}


def expires_at(expires_ms: int) -> str:
    """ISO 8601 UTC with milliseconds and Z, from integer ms (no float rounding)."""
    seconds, millis = divmod(expires_ms, 1000)
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S") + f".{millis:03d}Z"


def token_offer(token: str, expires_ms: int, ttl_s: int, mode: Mode) -> dict[str, Any]:
    """The fields that hand a fresh token over, shared by confirmation-required and DRAFT_CHANGED."""
    return {"confirmToken": token, "expiresAt": expires_at(expires_ms), "ttlSeconds": ttl_s,
            "instruction": _INSTRUCTIONS[mode]}


def confirmation_required(
    will_run: dict[str, Any], token: str, expires_ms: int, ttl_s: int, mode: Mode
) -> dict[str, Any]:
    return {"status": "confirmation-required", "confirmed": False, "dispatched": False, "action": ACTION,
            "preview": preview_body(will_run), **token_offer(token, expires_ms, ttl_s, mode)}


def confirmation_unsupported(cause: UnsupportedCause) -> dict[str, Any]:
    advice = "Set MCP_CONFIRM_MODE=ask-user to allow two-step confirmation."
    if cause == "ttl-invalid":  # the mode is not what stops it here
        advice = "Fix MCP_CONFIRM_TTL_SECONDS; then MCP_CONFIRM_MODE=ask-user allows two-step confirmation."
    note = (
        f"Nothing was done: {_UNSUPPORTED_WHY[cause]}, and this action is never taken without a confirmation. "
        + advice
    )
    return {"confirmed": False, "dispatched": False, "action": ACTION, "reason": "confirmation-unsupported",
            "note": note}


def _rejected(error: str, note: str) -> dict[str, Any]:
    return {"status": "confirmation-rejected", "confirmed": False, "dispatched": False, "error": error,
            "action": ACTION, "note": note}


def rejection(error: str) -> dict[str, Any]:
    """TOKEN_REUSED, TOKEN_EXPIRED or TOKEN_INVALID; DRAFT_CHANGED has its own builder."""
    return _rejected(error, _REJECTION_NOTES[error])


def draft_changed(will_run: dict[str, Any], offer: dict[str, Any] | None = None) -> dict[str, Any]:
    """Path 3 passes a token_offer; path 1 has no token to offer and passes none."""
    included = "the current preview and a fresh confirmToken are included" if offer else (
        "the current preview is included; call again to confirm it")
    note = f"Nothing was run: what would run no longer matches what was approved; {included}."
    return {**_rejected(DRAFT_CHANGED, note), "reason": "payload-changed", "preview": preview_body(will_run),
            **(offer or {})}


def not_confirmed() -> dict[str, Any]:
    return {"confirmed": False, "cancelled": True, "action": ACTION,
            "note": "Nothing was run: the confirmation was declined, cancelled, or left unchecked."}


def elicitation_question(will_run: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The form asked on paths 1 and 2: (message, requestedSchema)."""
    details = json_for_people(json.dumps({"action": ACTION, "details": will_run}, indent=2, ensure_ascii=False))
    schema = {
        "type": "object",
        "properties": {
            "confirmed": {
                "type": "boolean",
                "title": "Run this script",
                "description": "Check to run the script shown above once, exactly as shown.",
                "default": False,
            }
        },
        "required": ["confirmed"],
    }
    return encodable(f"Review and confirm running this skill script:\n{details}"), schema
