#!/bin/sh
# skill-mcp appliance entrypoint (SPEC §15.3).
# Non-root: run the command unchanged. Root: load the default-deny egress policy with the
# allowlist, then run the command as 10001 with no capabilities; never continue as root
# without the policy.
set -eu

APP_ID=10001
# Overridable only so the tests can run this file outside the image.
POLICY=${SKILL_MCP_EGRESS_POLICY:-/etc/skill-mcp/egress.nft}
CLI=${SKILL_MCP_CLI:-/app/venv/bin/skill-mcp}
PYTHON=/usr/bin/python3

die() {
    echo "skill-mcp entrypoint: $*" >&2
    exit 1
}

[ "$#" -gt 0 ] || die "no command given"

if [ "$(id -u)" != 0 ]; then
    exec "$@"
fi

# Step 6 clears the capability bounding set only with SETPCAP, and setpriv does not fail without it: check first.
needed=$((1 << 6 | 1 << 7 | 1 << 8)) # CAP_SETGID, CAP_SETUID, CAP_SETPCAP
effective=$(sed -n 's/^CapEff:[[:space:]]*//p' "/proc/$$/status")
[ $((0x$effective & needed)) = "$needed" ] ||
    die "started as root without SETUID, SETGID and SETPCAP (CapEff $effective), so it could not drop every capability: add --cap-add SETUID --cap-add SETGID --cap-add SETPCAP; refusing to start"

as_app() {
    setpriv --reuid "$APP_ID" --regid "$APP_ID" --clear-groups \
        --inh-caps=-all --bounding-set=-all --no-new-privs "$@"
}

# 1. The allowlist, computed as the unprivileged user with the server's environment.
hosts=$(as_app "$CLI" list --egress) ||
    die "could not compute the egress allowlist ($CLI list --egress failed); refusing to start"

# 2. Resolve before any rule is loaded (DNS may be closed afterwards). Also unprivileged.
# Output lines: "allow4 ADDR[/LEN]", "allow6 ...", "dns4 ...", "dns6 ..."; warnings on stderr.
resolve_py='
import ipaddress, re, socket, sys

def warn(msg):
    print("skill-mcp entrypoint: warning: " + msg, file=sys.stderr)

nets = []
for entry in re.split(r"[\s,]+", sys.stdin.read()):
    if not entry:
        continue
    try:
        nets.append(ipaddress.ip_network(entry, strict=False))
        continue
    except ValueError:
        pass
    if "*" in entry:
        warn("skipping wildcard egress entry %r (only exact hosts can be resolved)" % entry)
        continue
    if not re.fullmatch(r"[A-Za-z0-9.-]+", entry):
        warn("skipping egress entry %r: not a hostname, address or CIDR" % entry)
        continue
    try:
        infos = socket.getaddrinfo(entry, None, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:
        warn("skipping egress host %r: it does not resolve (%s)" % (entry, exc))
        continue
    for info in infos:
        addr = ipaddress.ip_address(info[4][0].split("%")[0])
        nets.append(ipaddress.ip_network(addr))

v4 = list(ipaddress.collapse_addresses(n for n in nets if n.version == 4))
v6 = list(ipaddress.collapse_addresses(n for n in nets if n.version == 6))
for net in v4:
    print("allow4", net)
for net in v6:
    print("allow6", net)
if v4 or v6:
    try:
        with open("/etc/resolv.conf") as conf:
            lines = conf.read().splitlines()
    except OSError as exc:
        warn("cannot read /etc/resolv.conf (%s); no resolver is allowed" % exc)
        lines = []
    for line in lines:
        words = line.split()
        if len(words) < 2 or words[0] != "nameserver":
            continue
        try:
            addr = ipaddress.ip_address(words[1].split("%")[0])
        except ValueError:
            warn("skipping nameserver %r from /etc/resolv.conf" % words[1])
            continue
        if not addr.is_loopback:
            print("dns%d" % addr.version, addr)
'
allow_entries=$(printf '%s\n%s\n' "$hosts" "${MCP_EGRESS_ALLOW:-}")
resolved=$(printf '%s\n' "$allow_entries" | as_app "$PYTHON" -I -c "$resolve_py") ||
    die "could not resolve the egress allowlist; refusing to start"

# 3. The policy. Without it nothing below may run as root.
nft_err=$(nft -f "$POLICY" 2>&1) ||
    die "could not load the egress policy $POLICY: ${nft_err:-nft failed} (the container needs NET_ADMIN); refusing to start"

# 4. The allowlist and, when it is non-empty, the resolvers. Each line is checked again here
# because it came from an unprivileged process.
elements=""
while read -r kind addr; do
    [ -n "$kind" ] || continue
    case $kind in
        allow4 | allow6 | dns4 | dns6) ;;
        *) die "unexpected resolver output: $kind $addr" ;;
    esac
    case $addr in
        "" | *[!0-9A-Fa-f.:/]*) die "unexpected resolver output: $kind $addr" ;;
    esac
    elements="${elements}add element inet skill_egress $kind { $addr }
"
done <<EOF
$resolved
EOF
if [ -n "$elements" ]; then
    nft_err=$(printf '%s' "$elements" | nft -f - 2>&1) ||
        die "could not add the egress allowlist: ${nft_err:-nft failed}; refusing to start"
fi
count=$(printf '%s' "$elements" | grep -c 'allow[46]' || true)
echo "skill-mcp entrypoint: egress policy loaded, $count allowlist entr$([ "$count" = 1 ] && echo y || echo ies)" >&2

# 5-6. Drop to 10001 with no capabilities: the server cannot change the rules.
export MCP_EGRESS_FENCED=1
exec setpriv --reuid "$APP_ID" --regid "$APP_ID" --clear-groups \
    --inh-caps=-all --bounding-set=-all --no-new-privs "$@"
