#!/usr/bin/env bash
# Container CI stage (SPEC §15.6 item 3) on a machine with no systemd and no container registry:
# a private dockerd, a Debian base image made with debootstrap, a BuildKit build with the pip CA
# as a secret, smoke tests over stdio, a leak check, and the compose egress stack (§15.4).
# Runs as root with apt; otherwise skipped with a notice. Bounded by a 600 s timeout.
#
# Environment (all optional):
#   SKILL_MCP_CI_CACHE  cache dir for the debootstrap tarball and dockerd's data root
#                       (default: <repo>/.ci/cache, gitignored)
#   DEBIAN_MIRROR       debootstrap mirror (default: the host's apt mirror, else deb.debian.org)
#   PIP_CA              CA bundle handed to the build as the pip_ca secret (default: pip's
#                       configured cert, else the system bundle)
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)

skip() { echo "SKIP: container test: $*"; exit 0; }
if [ "${SKILL_MCP_CT_TIMED:-}" != 1 ]; then
    [ "$(id -u)" -eq 0 ] || skip "needs root"
    command -v apt-get >/dev/null || skip "needs apt-get (Debian)"
    command -v timeout >/dev/null || skip "needs timeout (coreutils)"
    export SKILL_MCP_CT_TIMED=1
    rc=0
    timeout --kill-after=30 600 bash "$0" "$@" || rc=$?
    [ "$rc" -ne 124 ] || echo "FAIL: container test: timed out after 600 s" >&2
    exit "$rc"
fi

t0=$(date +%s)
cache=${SKILL_MCP_CI_CACHE:-$repo/.ci/cache}
mkdir -p "$cache"
cache=$(cd "$cache" && pwd)
run=$(mktemp -d /tmp/smct.XXXXXX)   # short path: dockerd's socket and exec root live here
image=skill-mcp:local
base=local/debian:bookworm
docker=/usr/bin/docker              # the Debian client: a newer one on PATH may demand buildx
project="skmcpct$$"
export DOCKER_HOST="unix://$run/docker.sock"

step() { echo "--- [$(($(date +%s) - t0)) s] $*"; }
fail() { echo "FAIL: container test: $*" >&2; exit 1; }
elapsed() { echo $(($(date +%s) - $1)); }

# ---- packages -------------------------------------------------------------------------------
need=()
[ -x /usr/sbin/dockerd ] && [ -x "$docker" ] || need+=(docker.io)
command -v docker-compose >/dev/null || need+=(docker-compose)
command -v debootstrap >/dev/null || need+=(debootstrap)
command -v nft >/dev/null || need+=(nftables)
command -v ip >/dev/null || need+=(iproute2)
if [ "${#need[@]}" -gt 0 ]; then
    step "apt-get install ${need[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
if pidof dockerd >/dev/null; then
    skip "another dockerd is running (pid $(pidof dockerd)); this test starts and owns its own"
fi

# ---- state before, for teardown ------------------------------------------------------------
tables_before=$(nft list tables 2>/dev/null || true)
docker0_before=no
ip link show docker0 >/dev/null 2>&1 && docker0_before=yes
forward_before=$(cat /proc/sys/net/ipv4/ip_forward)
dockerd_pid=""
compose_up=no

compose() { docker-compose --ansi never -p "$project" -f "$repo/compose.yaml" "$@"; }

teardown() {
    local rc=$?
    set +e
    trap - EXIT INT TERM
    echo "--- teardown"
    if [ "$compose_up" = yes ]; then
        compose down -v --remove-orphans >"$run/compose-down.log" 2>&1 ||
            echo "warning: docker-compose down failed, see $run/compose-down.log" >&2
    fi
    if [ -n "$dockerd_pid" ] && kill -0 "$dockerd_pid" 2>/dev/null; then
        kill -TERM "$dockerd_pid"
        for _ in $(seq 1 60); do kill -0 "$dockerd_pid" 2>/dev/null || break; sleep 0.5; done
        if kill -0 "$dockerd_pid" 2>/dev/null; then
            echo "warning: dockerd $dockerd_pid ignored SIGTERM for 30 s; sending SIGKILL" >&2
            kill -KILL "$dockerd_pid"
        fi
    fi
    # Remove what dockerd leaves behind, but only what did not exist before this test.
    local table
    while read -r table; do
        [ -n "$table" ] || continue
        # shellcheck disable=SC2086 # "table FAMILY NAME" splits into nft's arguments
        printf '%s\n' "$tables_before" | grep -qxF "$table" || nft delete $table
    done <<<"$(nft list tables 2>/dev/null)"
    if [ "$docker0_before" = no ] && ip link show docker0 >/dev/null 2>&1; then
        ip link delete docker0
    fi
    if [ "$(cat /proc/sys/net/ipv4/ip_forward)" != "$forward_before" ]; then
        echo "$forward_before" >/proc/sys/net/ipv4/ip_forward
    fi
    if [ "$rc" -ne 0 ] && [ -f "$run/dockerd.log" ]; then
        echo "--- last lines of dockerd.log" >&2
        tail -n 20 "$run/dockerd.log" >&2
    fi
    if findmnt -rn -o TARGET | grep -q "^$run"; then
        echo "warning: mounts remain under $run; leaving it in place" >&2
    else
        rm -rf "$run"
    fi
    exit "$rc"
}
trap teardown EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ---- policy check (cheap, first) -----------------------------------------------------------
step "policy check: nftables/egress.nft has no flush ruleset"
if grep -qiE 'flush[[:space:]]+ruleset' "$repo/nftables/egress.nft"; then
    fail "nftables/egress.nft contains 'flush ruleset' (it would wipe the engine's DNS rules)"
fi

# ---- dockerd --------------------------------------------------------------------------------
step "start dockerd (data root $cache/docker)"
setsid /usr/sbin/dockerd \
    --data-root "$cache/docker" --exec-root "$run/exec" --pidfile "$run/dockerd.pid" \
    --host "$DOCKER_HOST" >"$run/dockerd.log" 2>&1 </dev/null &
for _ in $(seq 1 120); do
    [ -s "$run/dockerd.pid" ] && dockerd_pid=$(cat "$run/dockerd.pid")
    [ -n "$dockerd_pid" ] && "$docker" info >/dev/null 2>&1 && break
    sleep 0.5
done
[ -n "$dockerd_pid" ] || dockerd_pid=$(jobs -p | tail -n 1)
"$docker" info >/dev/null 2>&1 || fail "dockerd did not come up within 60 s"
echo "dockerd pid $dockerd_pid"

# ---- base image without a registry ----------------------------------------------------------
tarball="$cache/debian-bookworm-minbase.tar.gz"
if ! "$docker" image inspect "$base" >/dev/null 2>&1; then
    if [ ! -s "$tarball" ]; then
        mirror=${DEBIAN_MIRROR:-}
        if [ -z "$mirror" ]; then
            mirror=$(sed -n 's/^URIs:[[:space:]]*\(http[^[:space:]]*\/debian\)\/*$/\1/p' \
                /etc/apt/sources.list.d/*.sources 2>/dev/null | head -n 1)
        fi
        if [ -z "$mirror" ]; then
            mirror=$(sed -n 's/^deb[[:space:]]\+\(http[^[:space:]]*\/debian\)\/*[[:space:]]\+bookworm[[:space:]].*/\1/p' \
                /etc/apt/sources.list 2>/dev/null | head -n 1)
        fi
        mirror=${mirror:-http://deb.debian.org/debian}
        step "debootstrap --variant=minbase bookworm from $mirror"
        tb=$(date +%s)
        rootfs="$run/rootfs"
        debootstrap --variant=minbase bookworm "$rootfs" "$mirror" >"$run/debootstrap.log" 2>&1 ||
            { tail -n 20 "$run/debootstrap.log" >&2; fail "debootstrap failed"; }
        rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/cache/apt/*.bin \
            "$rootfs"/var/lib/apt/lists/*
        tar --numeric-owner -C "$rootfs" -czf "$tarball.part" .
        mv "$tarball.part" "$tarball"
        rm -rf "$rootfs"
        echo "debootstrap + tarball: $(elapsed "$tb") s"
    fi
    step "docker import $base"
    "$docker" import "$tarball" "$base" >/dev/null
fi

# ---- build ----------------------------------------------------------------------------------
ca=${PIP_CA:-${PIP_CERT:-}}
if [ -z "$ca" ]; then
    for py in python3 /usr/bin/python3; do
        ca=$("$py" -m pip config list 2>/dev/null | sed -n "s/^[^=]*\.cert='\(.*\)'$/\1/p" | head -n 1) || true
        [ -z "$ca" ] || break
    done
fi
ca=${ca:-/etc/ssl/certs/ca-certificates.crt}
[ -s "$ca" ] || fail "CA bundle $ca is missing or empty"
step "build $image (BASE_IMAGE=$base, pip_ca secret from $ca)"
tb=$(date +%s)
DOCKER_BUILDKIT=1 "$docker" build --progress=plain \
    --build-arg "BASE_IMAGE=$base" --secret "id=pip_ca,src=$ca" \
    -t "$image" "$repo" >"$run/build.log" 2>&1 ||
    { tail -n 40 "$run/build.log" >&2; fail "docker build failed"; }
build_s=$(elapsed "$tb")
size=$("$docker" image inspect -f '{{.Size}}' "$image")
echo "build: ${build_s} s; image size: $((size / 1048576)) MiB ($size bytes)"

# ---- smoke ----------------------------------------------------------------------------------
step "smoke: user, interpreters, nft, venv not on PATH"
user=$("$docker" image inspect -f '{{.Config.User}}' "$image")
[ "$user" = "10001:10001" ] || fail "default user is '$user', expected 10001:10001"
"$docker" run --rm "$image" sh -euc '
    test "$(id -u):$(id -g)" = "10001:10001" || { echo "runs as $(id -u):$(id -g)"; exit 1; }
    for tool in python3 node nft setpriv; do command -v "$tool" >/dev/null || { echo "no $tool"; exit 1; }; done
    test "$(command -v python3)" = /usr/bin/python3 || { echo "python3 is $(command -v python3)"; exit 1; }
    case ":$PATH:" in *:/app/venv*) echo "venv on PATH: $PATH"; exit 1;; esac
    test -x /app/venv/bin/skill-mcp || { echo "no /app/venv/bin/skill-mcp"; exit 1; }
    ! /app/venv/bin/python -c "import pip" 2>/dev/null || { echo "pip left in the server venv"; exit 1; }
    ! /app/venv/bin/python -c "import setuptools" 2>/dev/null || { echo "setuptools left in the server venv"; exit 1; }
    test -f /skills/skill-mcp-demo/SKILL.md || { echo "no demo skill in /skills"; exit 1; }
    test "$(stat -c %u:%g /data)" = 10001:10001 || { echo "/data not owned by 10001"; exit 1; }
    test "$SKILLS_DIR" = /skills || { echo "SKILLS_DIR=$SKILLS_DIR"; exit 1; }
    # §15.2 ownership: what the image ships belongs to root; 10001 owns /data and can write nowhere else but the
    # sticky temporary directories. (A writable venv, policy or entrypoint would let the server widen the
    # allowlist, or run code as root, at the next fenced start.)
    for path in /app /app/venv /app/venv/bin/skill-mcp /app/entrypoint.sh /etc/skill-mcp/egress.nft \
        /skills /skills/skill-mcp-demo/SKILL.md; do
        test "$(stat -c %u:%g "$path")" = 0:0 || { echo "$path is owned by $(stat -c %u:%g "$path"), not root"; exit 1; }
    done
    test "$(stat -c %a /app/entrypoint.sh)" = 755 || { echo "/app/entrypoint.sh mode $(stat -c %a /app/entrypoint.sh)"; exit 1; }
    test "$(stat -c %a /etc/skill-mcp/egress.nft)" = 644 || { echo "egress.nft mode $(stat -c %a /etc/skill-mcp/egress.nft)"; exit 1; }
    writable=$(find / -xdev \( -path /proc -o -path /sys -o -path /dev \) -prune -o -writable -print 2>/dev/null |
        grep -vxE "/data|/tmp|/var/tmp|/run/lock|/var/lock" || true)
    test -z "$writable" || { echo "writable by 10001 beyond /data and the temporary directories:"; echo "$writable" | head -n 20; exit 1; }
    ! ls /var/cache/apt/archives/*.deb >/dev/null 2>&1 || { echo "downloaded .debs left in /var/cache/apt"; exit 1; }
    echo "python3 $(python3 -c "import sys; print(sys.version.split()[0], sys.prefix)"); node $(node --version)"
' || fail "image layout"
# Informational: whether this engine's seccomp profile lets reads take the link-free open (openat2);
# where it does not, every read takes the full check, with the same answers.
"$docker" run --rm "$image" /app/venv/bin/python -c '
from skill_mcp import paths
opener = paths._OPEN_LINK_FREE
fd = opener("/skills/skill-mcp-demo/SKILL.md") if opener else None
print("link-free open (openat2):", "in use" if fd is not None else "not available here; reads take the full check")
' || fail "link-free open probe"

step "fenced start (§15.3): the image's own 'skill-mcp list --egress' feeds the allowlist; the command runs as 10001, no caps, MCP_EGRESS_FENCED=1"
# A skill whose runnable script declares an address and a wildcard: the real CLI's output, read
# by the real entrypoint, gives one entry (the wildcard is skipped with a warning), MCP_EGRESS_ALLOW another.
mkdir -p "$run/egress-skills/ct-egress/scripts"
cat >"$run/egress-skills/ct-egress/SKILL.md" <<'MD'
---
name: ct-egress
description: Container-test skill declaring egress.
mcp-host:
  version: 1
  run:
    - script: scripts/noop.py
      interpreter: python3
  egress: [192.0.2.77, "*.wild.example"]
---
Container-test only.
MD
echo 'print("noop")' >"$run/egress-skills/ct-egress/scripts/noop.py"
chmod -R a+rX "$run/egress-skills"
fenced=$("$docker" run --rm --user 0:0 --cap-drop ALL \
    --cap-add NET_ADMIN --cap-add SETUID --cap-add SETGID --cap-add SETPCAP \
    -e MCP_EGRESS_ALLOW=198.51.100.0/24 -v "$run/egress-skills:/skills:ro" "$image" \
    sh -c 'echo "uid $(id -u):$(id -g) fenced ${MCP_EGRESS_FENCED:-unset} caps $(awk "/^Cap(Eff|Bnd)/ {print \$2}" /proc/self/status | tr "\n" " ")"' \
    2>"$run/fenced.err") || { cat "$run/fenced.err" >&2; fail "the fenced start did not run the command"; }
cat "$run/fenced.err"
echo "$fenced"
[ "$fenced" = "uid 10001:10001 fenced 1 caps 0000000000000000 0000000000000000 " ] ||
    fail "fenced start: expected uid 10001:10001, MCP_EGRESS_FENCED=1 and no capabilities, got: $fenced"
grep -q "egress policy loaded, 2 allowlist entries" "$run/fenced.err" ||
    fail "fenced start: the allowlist is not the declared address plus MCP_EGRESS_ALLOW"
grep -q "skipping wildcard egress entry '\*.wild.example'" "$run/fenced.err" ||
    fail "fenced start: no warning for the declared wildcard"

step "smoke: initialize, tools/list and a two-step skill_run of each demo script over stdio"
cat >"$run/mcp-driver.py" <<'PY'
"""Minimal stdlib JSON-RPC client for the MCP stdio transport (newline-delimited JSON)."""
import json
import os
import selectors
import subprocess
import sys
import time

DEMO = "skill-mcp-demo"
# argv: STDERR_LOG COMMAND...; the server's log lines go to STDERR_LOG.
proc = subprocess.Popen(sys.argv[2:], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                        stderr=open(sys.argv[1], "wb"), bufsize=0)
sel = selectors.DefaultSelector()
sel.register(proc.stdout, selectors.EVENT_READ)
buf = b""
next_id = 0


def send(msg):
    proc.stdin.write(json.dumps(msg).encode() + b"\n")
    proc.stdin.flush()


def read_message(deadline):
    global buf
    while b"\n" not in buf:
        left = deadline - time.monotonic()
        if left <= 0 or not sel.select(left):
            raise SystemExit("FAIL: no answer from the server in time")
        chunk = proc.stdout.read1(65536) if hasattr(proc.stdout, "read1") else proc.stdout.read(65536)
        if not chunk:
            raise SystemExit("FAIL: the server closed stdout")
        buf += chunk
    line, buf = buf.split(b"\n", 1)
    try:
        return json.loads(line)
    except ValueError:
        raise SystemExit(f"FAIL: non-JSON line on stdout: {line[:200]!r}")


def request(method, params, timeout=60):
    global next_id
    next_id += 1
    send({"jsonrpc": "2.0", "id": next_id, "method": method, "params": params})
    deadline = time.monotonic() + timeout
    while True:
        msg = read_message(deadline)
        if msg.get("id") == next_id and ("result" in msg or "error" in msg):
            if "error" in msg:
                raise SystemExit(f"FAIL: {method}: {msg['error']}")
            return msg["result"]
        # Notifications and server requests are not expected here; ignore them.


def tool(name, arguments):
    result = request("tools/call", {"name": name, "arguments": arguments})
    text = result["content"][0]["text"]
    if result.get("isError"):
        raise SystemExit(f"FAIL: {name} {arguments}: {text}")
    return json.loads(text)


init = request("initialize", {
    "protocolVersion": "2025-06-18",
    "capabilities": {},
    "clientInfo": {"name": "container-test", "version": "0"},
})
name = init.get("serverInfo", {}).get("name")
if name != "skill-mcp":
    raise SystemExit(f"FAIL: serverInfo.name is {name!r}")
print(f"initialize: {init['serverInfo']} protocol {init.get('protocolVersion')}")
send({"jsonrpc": "2.0", "method": "notifications/initialized"})

tools = [t["name"] for t in request("tools/list", {})["tools"]]
if tools != ["skill_list", "skill_load", "skill_file", "skill_run"]:
    raise SystemExit(f"FAIL: tools/list gave {tools}")
print(f"tools/list: {tools}")

# EXPECT_SCRUBBED: 1 when the server is PID 1; 0 under an init of its own uid, which keeps the environment.
scrubbed = tool("skill_list", {})["hardening"]["environScrubbed"]
if scrubbed != (os.environ["EXPECT_SCRUBBED"] == "1"):
    raise SystemExit(f"FAIL: environScrubbed is {scrubbed}, expected EXPECT_SCRUBBED={os.environ['EXPECT_SCRUBBED']}")
print(f"skill_list: environScrubbed {scrubbed}")

for script, interpreter in (("scripts/report.py", "python3"), ("scripts/report.js", "node")):
    first = tool("skill_run", {"name": DEMO, "script": script, "args": ["one", "two words"]})
    if first.get("status") != "confirmation-required" or not first.get("confirmToken"):
        raise SystemExit(f"FAIL: {script}: first call gave {first}")
    will = first["preview"]["willRun"]
    if will["interpreter"] != interpreter:
        raise SystemExit(f"FAIL: {script}: willRun interpreter {will['interpreter']}")
    second = tool("skill_run", {"name": DEMO, "script": script, "args": ["one", "two words"],
                                "confirmToken": first["confirmToken"]})
    if second.get("exitCode") != 0 or second.get("timedOut"):
        raise SystemExit(f"FAIL: {script}: run gave {second}")
    report = json.loads(second["stdout"])
    if report.get("argv", [])[-2:] != ["one", "two words"]:
        raise SystemExit(f"FAIL: {script}: argv {report.get('argv')}")
    if interpreter == "python3" and not report.get("executable", "").startswith("/usr/bin/python3"):
        raise SystemExit(f"FAIL: {script} ran with {report.get('executable')}, not Debian's python3 (outside the venv)")
    print(f"skill_run {script}: exit 0, interpreter {report.get('interpreter')} ({report.get('executable')}), "
          f"env {report.get('envNames')}")

proc.stdin.close()
try:
    rc = proc.wait(timeout=15)
except subprocess.TimeoutExpired:
    proc.kill()
    raise SystemExit("FAIL: the server did not exit within 15 s of stdin EOF")
if rc != 0:
    raise SystemExit(f"FAIL: the server exited {rc} on stdin EOF")
print("stdin EOF: clean exit")
PY
# As the README says to run it: no init, so the server is PID 1.
EXPECT_SCRUBBED=1 /usr/bin/python3 "$run/mcp-driver.py" "$run/server-stderr.log" "$docker" run -i --rm "$image" ||
    { tail -n 20 "$run/server-stderr.log" >&2; fail "stdio smoke"; }

step "an init of the server's uid (docker run --init as 10001) keeps the environment: the scrub reports it"
EXPECT_SCRUBBED=0 /usr/bin/python3 "$run/mcp-driver.py" "$run/server-stderr.log" \
    "$docker" run -i --rm --init -e PROBE_SECRET=p "$image" ||
    { tail -n 20 "$run/server-stderr.log" >&2; fail "stdio smoke under --init"; }
grep -q 'PID 1 runs as this server' "$run/server-stderr.log" || fail "no hardening.warning about the init"

step "README: each 'docker run -i' line of 'Run it in Docker', verbatim: runs, a left process, writes, SIGTERM mid-run"
cat >"$run/readme-run.py" <<'PY'
"""Runs each `docker run -i` command of the README's appliance section as written, from a directory holding
my-skills/ (the demo skill and the ct-probe skill), and checks over stdio: tools/list; a confirmed run of each
demo script; that a process a script leaves running is killed when the script exits; that /tmp and /data are
writable by the scripts; then, with a script still running, a SIGTERM to the docker client (a client stopping
its server; docker forwards the signal): exit 0, a `shutdown` log line with killedRun true."""
import json, re, signal, subprocess, sys, threading, time

readme, workdir, docker = sys.argv[1], sys.argv[2], sys.argv[3]
section = open(readme, encoding="utf-8").read().split("<!-- appliance:start -->")[1].split("<!-- appliance:end -->")[0]
commands = []
for block in re.findall(r"```sh\n(.*?)```", section, re.S):
    for command in re.sub(r"\\\n\s*", " ", block).splitlines():
        if command.startswith("docker run -i "):
            commands.append(command)
labels = ["fenced" if "--user 0:0" in c else "read-only" if "--read-only" in c else "unfenced" for c in commands]
if labels != ["unfenced", "fenced", "read-only"]:
    raise SystemExit(f"FAIL: expected the unfenced, fenced and read-only 'docker run -i' lines, found {commands}")


class Server:
    def __init__(self, label, command):
        self.label, self.next_id, self.stderr, self.runs = label, 0, [], 0
        self.proc = subprocess.Popen(["bash", "-c", "exec " + command], cwd=workdir, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.reader = threading.Thread(target=self._read_stderr, daemon=True)
        self.reader.start()

    def _read_stderr(self):
        for line in self.proc.stderr:
            self.stderr.append(line.decode(errors="replace"))

    def wait_run_started(self, count, timeout):
        deadline = time.monotonic() + timeout
        while sum('"event": "run.start"' in line for line in self.stderr) < count:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)
        return True

    def fail(self, why):
        self.proc.kill()
        raise SystemExit(f"FAIL: {self.label}: {why}; stderr tail: {''.join(self.stderr)[-1500:]}")

    def send(self, method, params=None, notify=False):
        message = {"jsonrpc": "2.0", "method": method, **({"params": params} if params is not None else {})}
        if not notify:
            self.next_id += 1
            message["id"] = self.next_id
        self.proc.stdin.write(json.dumps(message).encode() + b"\n")
        self.proc.stdin.flush()
        return self.next_id

    def request(self, method, params=None, timeout=60):
        wanted = self.send(method, params)
        watchdog = threading.Timer(timeout, self.proc.kill)  # a hang fails here, not at the stage's 600 s
        watchdog.start()
        try:
            while True:
                line = self.proc.stdout.readline()
                if not line:
                    self.fail(f"no answer to {method}")
                answer = json.loads(line)
                if answer.get("id") == wanted:
                    break
        finally:
            watchdog.cancel()
        if "error" in answer:
            self.fail(f"{method}: {answer['error']}")
        return answer["result"]

    def tool(self, name, arguments):
        result = self.request("tools/call", {"name": name, "arguments": arguments})
        if result.get("isError"):
            self.fail(f"{name} {arguments}: {result['content'][0]['text']}")
        return json.loads(result["content"][0]["text"])

    def token(self, skill, script, args):
        first = self.tool("skill_run", {"name": skill, "script": script, "args": args})
        if first.get("status") != "confirmation-required" or not first.get("confirmToken"):
            self.fail(f"{script} {args}: first call gave {first}")
        return first["confirmToken"]

    def run(self, skill, script, args):
        token = self.token(skill, script, args)
        outcome = self.tool("skill_run", {"name": skill, "script": script, "args": args, "confirmToken": token})
        self.runs += 1
        if outcome.get("exitCode") != 0 or outcome.get("timedOut"):
            self.fail(f"{script} {args}: run gave {outcome}")
        return outcome["stdout"]


def check(label, command):
    server = Server(label, command)
    server.request("initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                  "clientInfo": {"name": "readme", "version": "0"}})
    server.send("notifications/initialized", notify=True)
    tools = [tool["name"] for tool in server.request("tools/list")["tools"]]
    for script in ("scripts/report.py", "scripts/report.js"):
        report = json.loads(server.run("skill-mcp-demo", script, ["one", "two words"]))
        if report.get("argv", [])[-2:] != ["one", "two words"]:
            server.fail(f"{script}: argv {report.get('argv')}")
    left = server.run("ct-probe", "scripts/probe.py", ["leave"]).strip()
    state = server.run("ct-probe", "scripts/probe.py", ["state", left]).strip()
    if state != "gone":
        server.fail(f"the process {left} a script left running is still there after its run (state {state})")
    written = server.run("ct-probe", "scripts/probe.py", ["write", "/tmp", "/data"]).split("\n")
    if written[:2] != ["/tmp: writable", "/data: writable"]:
        server.fail(f"scripts cannot write: {written}")
    # A run still going when the stop comes: the server kills it and says so.
    server.send("tools/call", {"name": "skill_run", "arguments": {
        "name": "ct-probe", "script": "scripts/probe.py", "args": ["sleep"],
        "confirmToken": server.token("ct-probe", "scripts/probe.py", ["sleep"])}})
    if not server.wait_run_started(server.runs + 1, 15):
        server.fail("no run.start for the sleeping script within 15 s")
    start = time.monotonic()
    server.proc.send_signal(signal.SIGTERM)  # stdin stays open: only the signal may end it
    try:
        rc = server.proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        server.fail("still running 15 s after SIGTERM")
    took = time.monotonic() - start
    server.reader.join(5)  # the last log lines
    shutdown = [json.loads(line) for line in server.stderr if '"event": "shutdown"' in line]
    if rc != 0 or not shutdown or shutdown[0].get("killedRun") is not True:
        server.fail(f"SIGTERM mid-run gave exit {rc} after {took:.1f} s, shutdown logged: {shutdown}")
    print(f"{label}: tools/list {len(tools)} tools; both demo scripts exit 0; a left process {left} gone after "
          f"its run; /tmp and /data writable; SIGTERM mid-run -> exit 0 in {took:.2f} s, shutdown killedRun true")


for label, command in zip(labels, commands):
    try:
        check(label, command)
    finally:
        # Named volumes (not bind mounts) would stay in the cached data root: removed, pass or fail.
        for volume in re.findall(r"-v ([A-Za-z0-9][\w.-]*):/", command):
            for _ in range(20):  # in use until docker has removed the container
                if subprocess.run([docker, "volume", "rm", volume], capture_output=True).returncode == 0:
                    break
                time.sleep(0.5)
            else:
                print(f"warning: {label}: could not remove the volume {volume}", file=sys.stderr)
PY
mkdir -p "$run/readme/my-skills/ct-probe/scripts" "$run/readme/bin"
cp -r "$repo/skill_mcp/skills/skill-mcp-demo" "$run/readme/my-skills/"
cat >"$run/readme/my-skills/ct-probe/SKILL.md" <<'MD'
---
name: ct-probe
description: Container-test probe scripts (leave a process running, report a pid's state, sleep, write).
mcp-host:
  version: 1
  run:
    - script: scripts/probe.py
      interpreter: python3
      timeout: 120
---
Container-test only.
MD
cat >"$run/readme/my-skills/ct-probe/scripts/probe.py" <<'PY'
"""leave: start a detached grandchild (a session of its own) and exit, printing its pid; state PID: that
pid's state or "gone"; sleep: outlast the test; write DIR...: create and remove a file in each DIR."""
import os
import sys
import time

mode, rest = sys.argv[1], sys.argv[2:]
if mode == "leave":
    r, w = os.pipe()
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            null = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(null, fd)
            os.write(w, str(os.getpid()).encode())
            os.close(w)
            time.sleep(300)
        os._exit(0)
    os.close(w)
    os.wait()
    print(os.read(r, 32).decode())
elif mode == "state":
    try:
        with open(f"/proc/{rest[0]}/stat") as stat:
            print(stat.read().rsplit(")", 1)[1].split()[0])
    except FileNotFoundError:
        print("gone")
elif mode == "sleep":
    time.sleep(300)
elif mode == "write":
    for directory in rest:
        try:
            path = os.path.join(directory, f"probe-{os.getpid()}")
            with open(path, "w") as f:
                f.write("x")
            os.unlink(path)
            print(f"{directory}: writable")
        except OSError as exc:
            print(f"{directory}: {exc.strerror}")
PY
chmod -R a+rX "$run/readme"
ln -s "$docker" "$run/readme/bin/docker"
PATH="$run/readme/bin:$PATH" /usr/bin/python3 "$run/readme-run.py" "$repo/README.md" "$run/readme" "$docker" ||
    fail "a README 'docker run' line"

# ---- cold start, measured (reported, not asserted) ----------------------------------------------
step "cold start: spawn -> first tools/list answer, in the container and outside it"
cat >"$run/cold-start.py" <<'PY'
"""Median spawn -> first tools/list answer over interleaved runs of each command given as a JSON list."""
import json, statistics, subprocess, sys, time

commands = json.loads(sys.argv[1])
samples = {label: [] for label in commands}
for _ in range(5):
    for label, argv in commands.items():
        start = time.perf_counter()
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        for message in ({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "cold", "version": "0"}}},
                {"jsonrpc": "2.0", "method": "notifications/initialized"},
                {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}):
            proc.stdin.write(json.dumps(message).encode() + b"\n")
        proc.stdin.flush()
        while json.loads(proc.stdout.readline()).get("id") != 2:
            pass
        samples[label].append(time.perf_counter() - start)
        proc.stdin.close()
        proc.wait(timeout=30)
for label, values in samples.items():
    print(f"cold start {label}: median {statistics.median(values) * 1000:.0f} ms over {len(values)} runs")
PY
host_server="$repo/.venv/bin/skill-mcp"
if [ -x "$host_server" ]; then
    commands=$(printf '{"container": ["%s", "run", "-i", "--rm", "%s"], "host": ["%s"]}' \
        "$docker" "$image" "$host_server")
else
    commands=$(printf '{"container": ["%s", "run", "-i", "--rm", "%s"]}' "$docker" "$image")
fi
/usr/bin/python3 "$run/cold-start.py" "$commands" || echo "NOTICE: cold-start measurement failed (not a verdict)"

# ---- leak check -----------------------------------------------------------------------------
step "leak check: the pip CA and PIP_CERT are not in the image"
if "$docker" history --no-trunc "$image" | grep -q PIP_CERT; then
    fail "the image history mentions PIP_CERT"
fi
if "$docker" image inspect "$image" | grep -q PIP_CERT; then
    fail "the image config mentions PIP_CERT"
fi
cid=$("$docker" create "$image")
"$docker" export "$cid" >"$run/rootfs.tar"
"$docker" rm "$cid" >/dev/null
/usr/bin/python3 - "$ca" "$run/rootfs.tar" <<'PY' || fail "CA leak check"
"""Fail if a distinctive line of the pip CA bundle occurs anywhere in the image filesystem.

Certificates the image ships anyway (Debian's ca-certificates) are not distinctive; a line of
every other certificate in the bundle is searched for.
"""
import re
import sys
import tarfile

bundle = open(sys.argv[1], "rb").read()
pems = re.findall(rb"-----BEGIN CERTIFICATE-----\s+(.*?)-----END CERTIFICATE-----", bundle, re.S)
with tarfile.open(sys.argv[2]) as tar:
    shipped = b""
    for name in ("etc/ssl/certs/ca-certificates.crt", "./etc/ssl/certs/ca-certificates.crt"):
        try:
            shipped += tar.extractfile(name).read()
        except (KeyError, AttributeError):
            pass
    needles = []
    for pem in pems:
        lines = [l.strip() for l in pem.split(b"\n") if len(l.strip()) == 64]
        if lines and lines[len(lines) // 2] not in shipped:
            needles.append(lines[len(lines) // 2])
    if not needles:
        print("no certificate in the bundle is absent from the image's own trust store; "
              "nothing distinctive to search for")
        sys.exit(0)
    hits = []
    for member in tar:
        if not member.isfile():
            continue
        data = tar.extractfile(member).read()
        hits += [member.name for needle in needles if needle in data]
print(f"searched the image for {len(needles)} distinctive CA line(s): {len(hits)} hit(s)")
if hits:
    print("FAIL: CA material found in: " + ", ".join(sorted(set(hits))))
    sys.exit(1)
PY
rm -f "$run/rootfs.tar"

# ---- egress: the compose stack (§15.4) ------------------------------------------------------
step "egress: docker-compose stack (appliance must see outside blocked; control must see it open)"
compose_up=yes
compose run --rm appliance >"$run/appliance.log" 2>&1 && appliance_rc=0 || appliance_rc=$?
cat "$run/appliance.log"
compose run --rm control >"$run/control.log" 2>&1 && control_rc=0 || control_rc=$?
cat "$run/control.log"
[ "$control_rc" -eq 0 ] || fail "negative control could not reach outside (exit $control_rc): the test cannot see an open network"
[ "$appliance_rc" -eq 0 ] || fail "appliance probe failed (exit $appliance_rc)"

echo "PASS: container test ($(elapsed "$t0") s; build ${build_s} s; image $((size / 1048576)) MiB)"
