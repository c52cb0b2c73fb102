"""Static and engine-free checks of the appliance files (SPEC §15, acceptance items 168–175).

Checks that need root, nft, ip or setpriv skip with the missing piece named. Everything that
loads rules does so in a network namespace created (and deleted) by the test itself.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import tempfile
import tomllib
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from ruamel.yaml import YAML

REPO = Path(__file__).resolve().parent.parent
DOCKERFILE = REPO / "Dockerfile"
POLICY = REPO / "nftables" / "egress.nft"
ENTRYPOINT = REPO / "appliance" / "entrypoint.sh"
PROBE = REPO / "appliance" / "egress-probe.py"
SYSTEM_PYTHON = "/usr/bin/python3"  # uid 10001 cannot execute a per-user build
APP_DROP = ["setpriv", "--reuid", "10001", "--regid", "10001", "--clear-groups"]


def is_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


def need(*tools: str, root: bool = False) -> None:
    if root and not is_root():
        pytest.skip("needs root (network namespaces, uid changes)")
    for tool in tools:
        if tool.startswith("/"):
            if not os.access(tool, os.X_OK):
                pytest.skip(f"needs {tool}")
        elif shutil.which(tool) is None:
            pytest.skip(f"needs {tool} on PATH")


def yaml_load(path: Path) -> object:
    return YAML(typ="safe").load(path.read_text(encoding="utf-8"))


def dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs with continuation lines joined and comments dropped."""
    joined, current = [], ""
    for line in DOCKERFILE.read_text(encoding="utf-8").splitlines():
        if not current and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.rstrip().endswith("\\"):
            current += line.rstrip()[:-1] + " "
            continue
        joined.append(current + line)
        current = ""
    pairs = []
    for text in joined:
        word, _, rest = text.strip().partition(" ")
        pairs.append((word.upper(), rest.strip()))
    return pairs


# ---- Dockerfile (§15.2) ---------------------------------------------------------------------

def test_dockerfile_names_a_base_image_only_through_arg_base_image() -> None:
    text = DOCKERFILE.read_text(encoding="utf-8")
    instructions = dockerfile_instructions()
    assert instructions[0] == ("ARG", "BASE_IMAGE=debian:bookworm-slim")
    froms = [args for word, args in instructions if word == "FROM"]
    assert len(froms) >= 2, "a build stage and a final stage"
    for args in froms:
        assert re.fullmatch(r"\$\{BASE_IMAGE\}( AS \w+)?", args, re.I), f"FROM {args}"
    stages = {m.group(1).lower() for m in re.finditer(r"^FROM \S+ AS (\w+)", text, re.M | re.I)}
    for word, args in instructions:
        for ref in re.findall(r"--from=(\S+)", args):
            assert ref.lower() in stages, f"{word} --from={ref} names an image, not a stage"
    # The base image's name appears once, in the ARG default, and nothing names a registry.
    assert text.count("bookworm-slim") == 1
    assert not re.search(r"docker\.io|ghcr\.io|quay\.io|registry", text, re.I)


def test_dockerfile_has_no_syntax_directive() -> None:
    for line in DOCKERFILE.read_text(encoding="utf-8").splitlines():
        assert not re.match(r"\s*#\s*syntax\s*=", line, re.I), line


def test_dockerfile_pip_ca_is_a_build_secret_only() -> None:
    instructions = dockerfile_instructions()
    secret_runs = [args for word, args in instructions if word == "RUN" and "type=secret" in args]
    assert len(secret_runs) == 1
    run = secret_runs[0]
    assert "id=pip_ca" in run and "pip install" in run and "--no-cache-dir" in run
    assert re.search(r"\[ -s /run/secrets/pip_ca \]; then export PIP_CERT=/run/secrets/pip_ca", run)
    assert run.rstrip().endswith("pip uninstall -y --disable-pip-version-check pip setuptools"), "no build tools at run time"
    for word, args in instructions:
        if word in ("ENV", "ARG", "COPY", "ADD"):
            assert "PIP_CERT" not in args and "pip_ca" not in args, f"{word} {args}"
        if word == "RUN" and "type=secret" not in args:
            assert "PIP_CERT" not in args and "pip.conf" not in args, f"RUN {args}"


def test_dockerfile_final_stage_layout() -> None:
    instructions = dockerfile_instructions()
    last_from = max(i for i, (word, _) in enumerate(instructions) if word == "FROM")
    final = instructions[last_from:]
    words = [word for word, _ in final]
    text = "\n".join(f"{word} {args}" for word, args in final)
    assert ("USER", "10001:10001") in final
    assert ("ENTRYPOINT", '["/app/entrypoint.sh"]') in final
    assert ("CMD", '["/app/venv/bin/skill-mcp", "serve"]') in final
    assert "EXPOSE" not in words and "HEALTHCHECK" not in words
    env = " ".join(args for word, args in final if word == "ENV")
    assert "SKILLS_DIR=/skills" in env and "LANG=C.UTF-8" in env
    assert "PATH" not in env, "the venv must stay off PATH"
    for package in ("python3", "nodejs", "nftables", "ca-certificates"):
        assert re.search(rf"\b{package}\b", text), package
    assert "--uid 10001" in text and "--gid 10001" in text and " app" in text
    # What COPY brings in is root's, whatever the build context's modes: readable by 10001, writable by root only.
    assert "chmod -R a+rX,go-w /skills /etc/skill-mcp" in text
    assert "chown 10001:10001 /data" in text
    assert ("COPY", "--from=build /app/venv /app/venv") in final
    assert ("COPY", "skill_mcp/skills/skill-mcp-demo /skills/skill-mcp-demo") in final
    assert ("COPY", "nftables/egress.nft /etc/skill-mcp/egress.nft") in final
    assert ("COPY", "appliance/entrypoint.sh /app/entrypoint.sh") in final
    assert (REPO / "skill_mcp" / "skills" / "skill-mcp-demo" / "SKILL.md").is_file()


def test_every_apt_install_removes_the_lists_in_its_own_layer() -> None:
    installs = [args for word, args in dockerfile_instructions() if word == "RUN" and "apt-get install" in args]
    assert len(installs) == 2, "one per stage"
    for args in installs:
        assert args.rstrip().endswith("rm -rf /var/lib/apt/lists/*"), args
        # A base without debian:*-slim's docker-clean hook (the debootstrap tree CI imports) keeps
        # every downloaded .deb in /var/cache/apt: about 100 MiB in the image.
        assert "apt-get clean" in args, args
    # §15.2's Debian packages, across the two stages (python3-venv is needed only to build the venv).
    build = installs[0]
    assert re.search(r"\bpython3-venv\b", build) and "python3 -m venv /app/venv" in " ".join(
        args for word, args in dockerfile_instructions() if word == "RUN")
    installed = set(" ".join(installs).split())
    assert {"python3", "python3-venv", "nodejs", "nftables", "ca-certificates"} <= installed


def test_dockerignore_keeps_the_context_small() -> None:
    lines = (REPO / ".dockerignore").read_text(encoding="utf-8").split()
    assert "*" in lines, "allowlist style: everything out, then exceptions"
    assert "!.git" not in lines and "!.venv" not in lines and "!.ci" not in lines
    assert "!appliance/egress-probe.py" not in lines, "the probe is not copied into the image"


# ---- egress.nft (§15.3) ---------------------------------------------------------------------

def test_policy_has_no_flush_ruleset_and_the_sketch_rules() -> None:
    text = POLICY.read_text(encoding="utf-8")
    assert not re.search(r"flush\s+ruleset", text, re.I)
    assert "delete table inet skill_egress" in text
    rules = " ".join(text.split())
    for piece in (
        "set allow4 { type ipv4_addr; flags interval; }",
        "set allow6 { type ipv6_addr; flags interval; }",
        "set dns4 { type ipv4_addr; }",
        "set dns6 { type ipv6_addr; }",
        "type filter hook output priority 0; policy drop;",
        'oif "lo" accept',
        "ct state established,related accept",
        "ip daddr @dns4 meta l4proto { tcp, udp } th dport 53 accept",
        "ip6 daddr @dns6 meta l4proto { tcp, udp } th dport 53 accept",
        "ip daddr @allow4 accept",
        "ip6 daddr @allow6 accept",
    ):
        assert piece in rules, piece


# SPEC §15.3's sketch, rule for rule: the exact default-deny policy and its only allowances.
POLICY_SKETCH = """
table inet skill_egress
delete table inet skill_egress
table inet skill_egress {
  set allow4 { type ipv4_addr; flags interval; }
  set allow6 { type ipv6_addr; flags interval; }
  set dns4 { type ipv4_addr; }
  set dns6 { type ipv6_addr; }
  chain output {
    type filter hook output priority 0; policy drop;
    oif "lo" accept
    ct state established,related accept
    icmpv6 type { nd-neighbor-solicit, nd-neighbor-advert, nd-router-solicit } accept
    ip daddr @dns4 meta l4proto { tcp, udp } th dport 53 accept
    ip6 daddr @dns6 meta l4proto { tcp, udp } th dport 53 accept
    ip daddr @allow4 accept
    ip6 daddr @allow6 accept
  }
}
"""


def test_policy_is_exactly_the_sketch_in_order_with_nothing_else() -> None:
    # Comments and layout aside, the file is the sketch: no extra accept (a port, a uid, a
    # wider set), no rule moved ahead of another, no other table or chain.
    def lines(text: str) -> list[str]:
        return [" ".join(line.split("#", 1)[0].split()) for line in text.splitlines()
                if line.split("#", 1)[0].strip()]

    assert lines(POLICY.read_text(encoding="utf-8")) == lines(POLICY_SKETCH)


def test_policy_passes_nft_check() -> None:
    need("nft", "unshare")
    # nft -c still talks to the kernel; give it a namespace of its own so nothing real is read.
    cmd = ["unshare", "--net", "nft", "-c", "-f", str(POLICY)]
    if not is_root():
        cmd[1:1] = ["--user", "--map-root-user"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    if proc.returncode != 0 and "unshare failed" in proc.stderr:
        pytest.skip(f"cannot create a namespace here: {proc.stderr.strip()}")
    assert proc.returncode == 0, proc.stderr


@pytest.fixture
def netns() -> Iterator[str]:
    need("ip", "nft", root=True)
    name = f"skmcp-static-{uuid.uuid4().hex[:8]}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False)


def nft_in(ns: str, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", "netns", "exec", ns, "nft", *args], input=stdin,
                          capture_output=True, text=True, timeout=30)


def test_policy_loads_into_an_empty_namespace_and_over_itself(netns: str) -> None:
    # A stand-in for the engine's own rules in the same namespace: it must survive the load.
    engine = "table ip engine_dns {\n chain out {\n type nat hook output priority -100; policy accept;\n }\n}\n"
    assert nft_in(netns, "-f", "-", stdin=engine).returncode == 0
    first = nft_in(netns, "-f", str(POLICY))
    assert first.returncode == 0, first.stderr
    assert nft_in(netns, "add", "element", "inet", "skill_egress", "allow4", "{ 192.0.2.1 }").returncode == 0
    again = nft_in(netns, "-f", str(POLICY))
    assert again.returncode == 0, again.stderr
    listed = nft_in(netns, "-j", "list", "ruleset")
    assert listed.returncode == 0, listed.stderr
    objects = json.loads(listed.stdout)["nftables"]
    tables = {(o["table"]["family"], o["table"]["name"]) for o in objects if "table" in o}
    assert tables == {("ip", "engine_dns"), ("inet", "skill_egress")}
    sets = {o["set"]["name"]: o["set"] for o in objects if "set" in o}
    assert set(sets) == {"allow4", "allow6", "dns4", "dns6"}
    assert "elem" not in sets["allow4"], "reloading replaces the table, so the set is empty again"
    chains = [o["chain"] for o in objects if "chain" in o and o["chain"]["table"] == "skill_egress"]
    assert [(c["name"], c["hook"], c["policy"]) for c in chains] == [("output", "output", "drop")]


# ---- compose.yaml, fly.toml, mint.yaml (§15.4, §15.5) ----------------------------------------

def command_text(service: dict) -> str:
    command = service.get("command", "")
    return " ".join(command) if isinstance(command, list) else str(command)


def environment(service: dict) -> dict[str, str]:
    env = service.get("environment", {})
    if isinstance(env, list):
        return dict(item.split("=", 1) for item in env)
    return {k: str(v) for k, v in env.items()}


def test_compose_file() -> None:
    doc = yaml_load(REPO / "compose.yaml")
    assert doc["version"] == "3.8"
    services = doc["services"]
    assert set(services) == {"outside", "allowed", "appliance", "control"}
    assert len(doc["networks"]) == 1
    network = next(iter(doc["networks"]))
    # Nothing beyond §15.4's keys: no build, ports, privileged, security_opt or network_mode
    # (a service off the one network, or in the host's, would prove nothing about the policy).
    common = {"image", "user", "init", "command", "networks"}
    keys = {"outside": common, "allowed": common,
            "appliance": common | {"cap_drop", "cap_add", "environment", "volumes", "depends_on"},
            "control": common | {"cap_drop", "volumes", "depends_on"}}
    for name, service in services.items():
        assert set(service) == keys[name], name
        assert service["init"] is True, name
        assert service["image"] == "skill-mcp:local", name
        assert service["networks"] == [network], name
    for name in ("outside", "allowed"):
        assert services[name]["user"] == "10001:10001"
        assert command_text(services[name]).startswith("python3 -m http.server 8080")

    appliance = services["appliance"]
    assert appliance["user"] == "0:0"
    assert appliance["cap_drop"] == ["ALL"]
    assert sorted(appliance["cap_add"]) == ["NET_ADMIN", "SETGID", "SETPCAP", "SETUID"]
    assert environment(appliance) == {"MCP_EGRESS_ALLOW": "allowed"}
    assert any(v.endswith(":ro") and "egress-probe.py" in v for v in appliance["volumes"])
    cmd = command_text(appliance)
    for piece in ("egress-probe.py check", "--expect-uid=10001", "--expect-nft-denied", "--loopback",
                  "outside:8080=blocked", "allowed:8080=open"):
        assert piece in cmd, piece

    control = services["control"]
    assert control["user"] == "10001:10001"
    assert "cap_add" not in control and control.get("cap_drop") == ["ALL"]
    assert "MCP_EGRESS_ALLOW" not in environment(control)
    assert any(v.endswith(":ro") and "egress-probe.py" in v for v in control["volumes"])
    assert "outside:8080=open" in command_text(control)


def test_fly_toml() -> None:
    doc = tomllib.loads((REPO / "fly.toml").read_text(encoding="utf-8"))
    # Builds the repository Dockerfile: no [build] image (it would win over the Dockerfile) or builder.
    assert doc["build"] == {"dockerfile": "Dockerfile"}
    assert doc["env"] == {"SKILLS_DIR": "/skills"}
    (vm,) = doc["vm"]
    assert vm["cpu_kind"] == "shared"
    assert vm.get("memory") == "512mb" or vm.get("memory_mb") == 512
    for forbidden in ("http_service", "services", "mounts", "secrets"):
        assert forbidden not in doc, forbidden


def test_mint_yaml() -> None:
    text = (REPO / "mint.yaml").read_text(encoding="utf-8")
    doc = yaml_load(REPO / "mint.yaml")
    assert doc["version"] == 1 and doc["name"] == "Skills" and doc["slug"] == "skills"
    assert isinstance(doc["summary"], str) and doc["summary"] and "\n" not in doc["summary"]
    assert doc["egress"] == {"allow": []}
    assert set(doc) == {"version", "name", "slug", "summary", "egress"}
    comments = " ".join(" ".join(line.split("#", 1)[1].split()) for line in text.splitlines() if "#" in line)
    # §15.5: each thing it deliberately does not propose, and why, is said in a comment.
    for said in (
        "runtime", "tier",  # a package may not choose its tier
        "skills", "pinned", "read-only", "MCP_SKILLS_PATH",
        "state.dataDir", "MCP_DATA_DIR", "TMPDIR",
        "env:",
        "tools narrowing", "skill_list", "skill_load", "skill_file", "non-executable",
        "real egress", "declare",
        "the adapter itself reaches nothing",
    ):
        assert said in comments, said


# ---- entrypoint (§15.3) ---------------------------------------------------------------------

def test_entrypoint_is_posix_sh_with_set_eu() -> None:
    lines = ENTRYPOINT.read_text(encoding="utf-8").splitlines()
    assert lines[0] == "#!/bin/sh"
    assert "set -eu" in lines
    assert os.access(ENTRYPOINT, os.X_OK)
    shells = [s for s in ("dash", "sh") if shutil.which(s)]
    if not shells:
        pytest.skip("no sh to check the syntax with")
    proc = subprocess.run([shells[0], "-n", str(ENTRYPOINT)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A directory uid 10001 can read (pytest's tmp_path is private to root)."""
    path = Path(tempfile.mkdtemp(prefix="skmcp-appliance-"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def stage(shared_dir: Path, cli_output: str) -> dict[str, str]:
    """Copies of the entrypoint and policy, and a stand-in `skill-mcp` printing cli_output."""
    shutil.copy(ENTRYPOINT, shared_dir / "entrypoint.sh")
    shutil.copy(POLICY, shared_dir / "egress.nft")
    cli = shared_dir / "skill-mcp"
    cli.write_text(f"#!/bin/sh\n[ \"$*\" = 'list --egress' ] || exit 2\nprintf '%s' '{cli_output}'\n")
    for path, mode in ((shared_dir / "entrypoint.sh", 0o755), (shared_dir / "egress.nft", 0o644), (cli, 0o755)):
        path.chmod(mode)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MCP_")}
    env.update(SKILL_MCP_CLI=str(cli), SKILL_MCP_EGRESS_POLICY=str(shared_dir / "egress.nft"))
    return env


REPORT = ("import json, os, sys; status = dict(l.split(':\\t') for l in open('/proc/self/status')"
          " .read().splitlines() if l.startswith(('Cap', 'NoNewPrivs'))); print(json.dumps({"
          "'argv': sys.argv[1:], 'uid': [os.getuid(), os.geteuid()], 'gid': [os.getgid(), os.getegid()],"
          " 'groups': os.getgroups(), 'fenced': os.environ.get('MCP_EGRESS_FENCED'), 'status': status}))")


def test_entrypoint_as_non_root_execs_the_command_unchanged(shared_dir: Path) -> None:
    need("setpriv", SYSTEM_PYTHON)
    env = stage(shared_dir, "")
    command = [str(shared_dir / "entrypoint.sh"), SYSTEM_PYTHON, "-c", REPORT, "a b", "$HOME", "", "-x"]
    if is_root():
        command = [*APP_DROP, *command]
    proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["argv"] == ["a b", "$HOME", "", "-x"]
    assert report["fenced"] is None, "a non-root start loads no policy and claims no fence"
    assert proc.stderr == ""
    if is_root():
        assert report["uid"] == [10001, 10001]


def test_entrypoint_as_non_root_passes_the_exit_status(shared_dir: Path) -> None:
    need("setpriv")
    env = stage(shared_dir, "")
    command = [str(shared_dir / "entrypoint.sh"), "sh", "-c", "exit 7"]
    if is_root():
        command = [*APP_DROP, *command]
    assert subprocess.run(command, env=env, timeout=30).returncode == 7


def test_entrypoint_as_root_without_net_admin_refuses_to_start(shared_dir: Path) -> None:
    need("setpriv", "unshare", "nft", SYSTEM_PYTHON, root=True)
    env = stage(shared_dir, "192.0.2.10\n")
    env["MCP_EGRESS_ALLOW"] = "198.51.100.0/24"
    marker = shared_dir / "command-ran"
    # Root in a throwaway network namespace, with CAP_NET_ADMIN removed from the bounding set
    # (so neither the shell nor nft can have it) but SETUID/SETGID/SETPCAP kept.
    proc = subprocess.run(
        ["unshare", "--net", "setpriv", "--inh-caps=-all", "--bounding-set=-net_admin",
         str(shared_dir / "entrypoint.sh"), "touch", str(marker)],
        env=env, capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode != 0
    assert not marker.exists(), "the command must not run without the policy"
    assert "could not load the egress policy" in proc.stderr
    assert "Operation not permitted" in proc.stderr


@pytest.mark.parametrize("missing", ["setpcap", "setuid", "setgid"])
def test_entrypoint_as_root_without_a_capability_it_drops_with_refuses_to_start(shared_dir: Path, missing: str) -> None:
    # Without SETPCAP, setpriv leaves the bounding set as it is and still runs the command.
    need("setpriv", "unshare", "nft", SYSTEM_PYTHON, root=True)
    env = stage(shared_dir, "192.0.2.10\n")
    marker = shared_dir / "command-ran"
    proc = subprocess.run(
        ["unshare", "--net", "setpriv", "--inh-caps=-all", f"--bounding-set=-{missing}",
         str(shared_dir / "entrypoint.sh"), "touch", str(marker)],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode != 0 and not marker.exists()
    assert "started as root without SETUID, SETGID and SETPCAP (CapEff " in proc.stderr
    assert "add --cap-add SETUID --cap-add SETGID --cap-add SETPCAP; refusing to start" in proc.stderr


def test_entrypoint_as_root_loads_the_policy_and_drops_everything(shared_dir: Path, netns: str) -> None:
    need("setpriv", "unshare", "mount", SYSTEM_PYTHON)
    env = stage(shared_dir, "192.0.2.10\nlocalhost\n")
    env["MCP_EGRESS_ALLOW"] = "198.51.100.7/24, 2001:db8::1\t*.example.com  not_a_host,192.0.2.10"
    resolv = shared_dir / "resolv.conf"
    resolv.write_text("nameserver 127.0.0.53\nnameserver 192.0.2.53\nnameserver 2001:db8::53\n")
    resolv.chmod(0o644)
    # A private mount namespace shows the entrypoint a resolv.conf made for this test.
    script = 'mount --bind "$1" /etc/resolv.conf && shift && exec "$@"'
    proc = subprocess.run(
        ["ip", "netns", "exec", netns, "unshare", "--mount", "--propagation", "private",
         "sh", "-c", script, "sh", str(resolv),
         str(shared_dir / "entrypoint.sh"), SYSTEM_PYTHON, "-c", REPORT, "served"],
        env=env, capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["argv"] == ["served"]
    assert report["uid"] == [10001, 10001] and report["gid"] == [10001, 10001]
    assert report["groups"] == []
    assert report["fenced"] == "1"
    for cap in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
        assert int(report["status"][cap], 16) == 0, cap
    assert report["status"]["NoNewPrivs"] == "1"
    assert "wildcard" in proc.stderr and "'*.example.com'" in proc.stderr
    assert "'not_a_host'" in proc.stderr

    listed = nft_in(netns, "-j", "list", "table", "inet", "skill_egress")
    assert listed.returncode == 0, listed.stderr
    sets = {o["set"]["name"]: o["set"].get("elem", []) for o in json.loads(listed.stdout)["nftables"]
            if "set" in o}

    def flat(elems: list) -> set[str]:
        out = set()
        for e in elems:
            if isinstance(e, dict) and "prefix" in e:
                out.add(f"{e['prefix']['addr']}/{e['prefix']['len']}")
            else:
                out.add(str(e))
        return out

    assert {"192.0.2.10", "198.51.100.0/24", "127.0.0.1"} <= flat(sets["allow4"])
    assert "2001:db8::1" in flat(sets["allow6"])
    assert flat(sets["dns4"]) == {"192.0.2.53"}, "loopback resolvers already pass"
    assert flat(sets["dns6"]) == {"2001:db8::53"}

    # Started again in the same namespace, the policy loads over itself.
    again = subprocess.run(
        ["ip", "netns", "exec", netns, str(shared_dir / "entrypoint.sh"), "true"],
        env=env, capture_output=True, text=True, timeout=60,
    )
    assert again.returncode == 0, again.stderr


def test_entrypoint_computes_the_allowlist_as_10001_with_the_servers_environment_before_the_policy(
        shared_dir: Path, netns: str) -> None:
    # §15.3 step 1: `list --egress` runs as uid 10001 (via setpriv), with the environment the
    # server gets, before any rule is loaded. The stand-in CLI reports who it runs as and
    # whether a datagram to a non-loopback address still leaves (it does only without rules).
    need("setpriv", SYSTEM_PYTHON)
    for args in (["link", "add", "skA", "type", "veth", "peer", "name", "skB"],
                 ["addr", "add", "192.0.2.1/24", "dev", "skA"], ["link", "set", "skA", "up"],
                 ["link", "set", "skB", "up"]):
        subprocess.run(["ip", "-n", netns, *args], check=True)
    env = stage(shared_dir, "")
    send = ("import socket\ntry:\n socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'x', ('192.0.2.2', 9))"
            "\n print('sent')\nexcept OSError as e:\n print(e.strerror)")
    (shared_dir / "skill-mcp").write_text(
        "#!/bin/sh\n[ \"$*\" = 'list --egress' ] || exit 2\n"
        f"echo \"CLI uid=$(id -u) gid=$(id -g) groups=$(id -G) marker=$SERVER_MARKER"
        f" $(grep CapEff /proc/self/status) egress=$({SYSTEM_PYTHON} -c \"{send}\")\" >&2\n"
        "echo 192.0.2.2\n")
    env["SERVER_MARKER"] = "from-the-server-env"
    proc = subprocess.run(["ip", "netns", "exec", netns, str(shared_dir / "entrypoint.sh"), SYSTEM_PYTHON, "-c", send],
                          env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    (line,) = [line for line in proc.stderr.splitlines() if line.startswith("CLI ")]
    assert line == ("CLI uid=10001 gid=10001 groups=10001 marker=from-the-server-env"
                    " CapEff:\t0000000000000000 egress=sent"), line
    # The server, started after the policy with 192.0.2.2 allowed, still sends; the policy is on.
    assert proc.stdout.strip() == "sent"
    listed = nft_in(netns, "list", "set", "inet", "skill_egress", "allow4")
    assert "192.0.2.2" in listed.stdout, listed.stdout


@pytest.mark.parametrize("cli_output", ["", "*.example.com\nnot_a_host\n"], ids=["empty", "nothing-resolvable"])
def test_entrypoint_as_root_with_an_empty_allowlist_opens_no_resolver(
        shared_dir: Path, netns: str, cli_output: str) -> None:
    # Resolvers open only with something to reach: entries that yield no address (a wildcard,
    # a non-host) leave the allowlist sets empty, and so dns4/dns6 too (README, step 4).
    need("setpriv", "unshare", "mount", SYSTEM_PYTHON)
    env = stage(shared_dir, cli_output)
    resolv = shared_dir / "resolv.conf"
    resolv.write_text("nameserver 192.0.2.53\nnameserver 2001:db8::53\n")
    resolv.chmod(0o644)
    script = 'mount --bind "$1" /etc/resolv.conf && shift && exec "$@"'
    proc = subprocess.run(["ip", "netns", "exec", netns, "unshare", "--mount", "--propagation", "private",
                           "sh", "-c", script, "sh", str(resolv), str(shared_dir / "entrypoint.sh"), "true"],
                          env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "egress policy loaded, 0 allowlist entries" in proc.stderr
    listed = nft_in(netns, "-j", "list", "table", "inet", "skill_egress")
    sets = [o["set"] for o in json.loads(listed.stdout)["nftables"] if "set" in o]
    assert all("elem" not in s for s in sets), sets


def test_entrypoint_refuses_when_the_allowlist_cannot_be_computed(shared_dir: Path, netns: str) -> None:
    need("setpriv", SYSTEM_PYTHON)
    env = stage(shared_dir, "")
    (shared_dir / "skill-mcp").write_text("#!/bin/sh\necho broken >&2\nexit 3\n")
    marker = shared_dir / "command-ran"
    proc = subprocess.run(["ip", "netns", "exec", netns, str(shared_dir / "entrypoint.sh"), "touch", str(marker)],
                          env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0
    assert not marker.exists()
    assert "could not compute the egress allowlist" in proc.stderr


# ---- README's docker run lines (run verbatim by ci/container-test.sh) ------------------------

def readme_docker_runs() -> dict[str, list[str]]:
    """The `docker run -i` lines of the README's appliance section, found as ci/container-test.sh finds them."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    section = text.split("<!-- appliance:start -->")[1].split("<!-- appliance:end -->")[0]
    runs: dict[str, list[str]] = {}
    for block in re.findall(r"```sh\n(.*?)```", section, re.S):
        for command in re.sub(r"\\\n\s*", " ", block).splitlines():
            if command.startswith("docker run -i "):
                argv = shlex.split(command)
                label = "fenced" if "--user" in argv else "read-only" if "--read-only" in argv else "unfenced"
                assert label not in runs, command
                runs[label] = argv
    return runs


def flag_values(argv: list[str], flag: str) -> list[str]:
    return [argv[i + 1] for i, word in enumerate(argv[:-1]) if word == flag]


def test_readme_docker_run_lines_drop_what_the_server_does_not_need() -> None:
    runs = readme_docker_runs()
    assert list(runs) == ["unfenced", "fenced", "read-only"]
    for label, argv in runs.items():
        assert argv[:4] == ["docker", "run", "-i", "--rm"] and argv[-1] == "skill-mcp:local", label
        assert flag_values(argv, "--cap-drop") == ["ALL"], label
        assert flag_values(argv, "--security-opt") == ["no-new-privileges"], label
        assert "$PWD/my-skills:/skills:ro" in flag_values(argv, "-v"), label
    for label in ("unfenced", "read-only"):
        argv = runs[label]
        # Started as 10001: no capability, and no init of the server's uid (it would keep the environment).
        assert "--cap-add" not in argv and "--init" not in argv and "--user" not in argv, label
    fenced = runs["fenced"]
    assert flag_values(fenced, "--user") == ["0:0"] and "--init" in fenced
    # What the entrypoint checks for (SETUID, SETGID, SETPCAP), NET_ADMIN for the policy, KILL for the root init.
    assert sorted(flag_values(fenced, "--cap-add")) == ["KILL", "NET_ADMIN", "SETGID", "SETPCAP", "SETUID"]
    readonly = runs["read-only"]
    assert flag_values(readonly, "--tmpfs") == ["/tmp"]
    assert any(re.fullmatch(r"[A-Za-z0-9][\w.-]*:/data", volume) for volume in flag_values(readonly, "-v")), \
        "a named volume on /data"


def test_readme_client_configurations_carry_the_same_options() -> None:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    section = text.split("<!-- appliance:start -->")[1].split("<!-- appliance:end -->")[0]
    (config,) = re.findall(r"```json\n(.*?)```", section, re.S)
    args = json.loads(config)["mcpServers"]["skills"]["args"]
    assert args[:3] == ["run", "-i", "--rm"]
    assert flag_values(args, "--cap-drop") == ["ALL"]
    assert flag_values(args, "--security-opt") == ["no-new-privileges"]
    for line in re.findall(r"`claude mcp add [^`]*`", section):
        assert "--cap-drop ALL --security-opt no-new-privileges" in " ".join(line.split()), line


def test_container_test_runs_the_readme_lines_verbatim() -> None:
    script = (REPO / "ci" / "container-test.sh").read_text(encoding="utf-8")
    assert 'split("<!-- appliance:start -->")' in script and 'command.startswith("docker run -i ")' in script
    assert 'labels != ["unfenced", "fenced", "read-only"]' in script


# ---- probe (§15.4) --------------------------------------------------------------------------

def probe_loopback(expected_uid: int) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [SYSTEM_PYTHON, str(PROBE), "check", "--loopback", f"--expect-uid={expected_uid}"],
        capture_output=True, text=True, timeout=30,
    )


def test_probe_loopback_listener_and_usage_error() -> None:
    need(SYSTEM_PYTHON)
    proc = probe_loopback(os.getuid())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert re.search(r"^CONNECTED 127\.0\.0\.1:\d+ .* expected open: ok$", proc.stdout, re.M)
    assert "PROBE PASS" in proc.stdout
    bad = subprocess.run([SYSTEM_PYTHON, str(PROBE), "check", "nonsense"], capture_output=True, text=True)
    assert bad.returncode == 2
    # One unmet expectation is enough for a failing verdict (exit 1), the others still printed.
    wrong = probe_loopback(os.getuid() + 1)
    assert wrong.returncode == 1, wrong.stdout + wrong.stderr
    assert re.search(r"^CONNECTED 127\.0\.0\.1:\d+ .* expected open: ok$", wrong.stdout, re.M)
    assert "PROBE FAIL" in wrong.stdout
    # §15.4: a 3 s connect timeout.
    assert re.search(r"^CONNECT_TIMEOUT = 3(\.0)?$", PROBE.read_text(encoding="utf-8"), re.M)
