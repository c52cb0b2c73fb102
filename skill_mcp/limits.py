"""The fixed numbers and name lists of discovery, paths, reads and runs (SPEC §3.1, §6, §7, §9). A number that
belongs to one module's protocol alone (a page size, a drain time) stays with that module."""

import re

MAX_SKILLS_DEFAULT = 32
MAX_SKILLS_CEILING = 4096
MAX_FILES_PER_SKILL = 2000
MAX_DIRS_PER_SKILL = 2000
# Not in the spec, which caps what is listed: entries that are skipped or refused must not cost a skill's walk, its
# problems and so every listing without bound (R3).
MAX_UNLISTED_ENTRIES = 16384
MAX_UNUSABLE_PATH_PROBLEMS = 32
SKILL_MD = "SKILL.md"
MAX_SKILL_MD_BYTES = 262144
MAX_FRONTMATTER_BYTES = 65536
MAX_YAML_DEPTH = 16
DECLARATION_VERSION = 1
DEFAULT_TIMEOUT_MS = 60000
MAX_TIMEOUT_MS = 300000

MAX_PATH_CHARS = 1024
MAX_PATHS_PER_CALL = 8
MAX_FILE_BYTES = 1048576
MAX_CALL_BYTES = 4194304

MAX_ARGS = 64
# Not in the spec: every preview hashes the whole script on the event loop, so a huge (or sparse) one would stall
# every other request; no interpreted script comes near this.
MAX_SCRIPT_BYTES = 16777216
MAX_ARG_BYTES = 8192
MAX_OUTPUT_BYTES = 1048576
# A client's message is small (a call's arguments, a form's answer); a longer line is refused unparsed, since
# parsing 100 MB holds the event loop, signals and the exit deadline for 10 s and more.
MAX_MESSAGE_CHARS = 4194304

SKILL_NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
ENV_NAME_PATTERN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
EGRESS_PATTERN = re.compile(r"[A-Za-z0-9.*-]+")

# The Agent Skills format's own rules (the Skills extension and `skill-mcp check` apply them).
AGENT_SKILLS_NAME_PATTERN = re.compile(r"[a-z0-9]+(-[a-z0-9]+)*")
AGENT_SKILLS_MAX_NAME_CHARS = 64
AGENT_SKILLS_MAX_DESCRIPTION_CHARS = 1024


AGENT_SKILLS_NAME_RULE = f"1-{AGENT_SKILLS_MAX_NAME_CHARS} lowercase letters, digits and single hyphens"


def is_agent_skills_name(name: str) -> bool:
    return len(name) <= AGENT_SKILLS_MAX_NAME_CHARS and AGENT_SKILLS_NAME_PATTERN.fullmatch(name) is not None


INTERPRETERS = ("node", "python3")

AMBIENT_SCRIPT_ALLOWLIST = ("PATH", "HOME", "LANG", "TZ", "TMPDIR")

PROXY_VARIABLES = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy")

# Variables that change what an interpreter or the dynamic loader runs before the script itself.
LOADER_VARIABLES = frozenset(
    {
        "NODE_OPTIONS", "NODE_REPL_EXTERNAL_MODULE", "NODE_PATH", "LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT",
        "PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP",
    }
)
# §9.6's list, plus the proxy variables, which are never handed to scripts either (§2.2): a proxy URL can carry
# credentials. A declaration asking for any of these draws a problem; the environment drops it regardless.
RESERVED_SCRIPT_ENV = frozenset(
    {
        *PROXY_VARIABLES,
        *LOADER_VARIABLES,
        "MCP_SKILLS_PATH", "MCP_SKILL_RUN", "SKILLS_DIR", "MCP_HOST_METER_FILE", "MCP_BLOB_BASE_URL",
        "MCP_BLOB_SIGNING_KEY", "MCP_SKILL_ALLOW_UNSCRUBBED", "MCP_CONFIRM_MODE", "MCP_CONFIRM_ELICITATION",
        "MCP_CONFIRM_TTL_SECONDS", "MCP_CONFIRM_SECRET", "MCP_HOST_CONFIRM_SECRET", "MCP_MAX_SKILLS",
        "MCP_SKILL_NODE", "MCP_SKILL_PYTHON", "MCP_SKILL_RLIMIT_NPROC", "MCP_SKILL_RLIMIT_AS_MB",
        "MCP_LOG_LEVEL", "MCP_LOG_FORMAT", "MCP_EGRESS_FENCED", "MCP_EGRESS_ALLOW",
    }
)
