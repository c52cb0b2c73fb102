"""SPEC §2.5 interpreter lookup (§17 items 17–18), against fake interpreters in a tmp dir."""

import os
import shutil
import sys

import pytest
from support import as_unprivileged, world_readable_dir
from wire import clean_environ, legacy_handshake, running, tool_payload

from skill_mcp.config import ConfigWarning, load_config
from skill_mcp.interpreters import _inside, find_interpreters, server_venv_prefix


def executable(path, mode=0o755, content=b"\x7fELF, a stand-in interpreter\n"):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as handle:
        handle.write(content)
    os.chmod(path, mode)
    return str(path)


def shim(path):
    return executable(path, content=b'#!/usr/bin/env bash\nexec pyenv exec "$@"\n')


def config(**environ):
    return load_config(environ, "/", "/bundled")[0]


@pytest.fixture
def tree(tmp_path):
    """A fake server venv with python3 first on PATH, and system dirs holding node and python3."""
    venv = tmp_path / "venv"
    executable(venv / "bin" / "python3")
    executable(tmp_path / "usr" / "bin" / "python3")
    executable(tmp_path / "usr" / "bin" / "node")
    search = os.pathsep.join([str(venv / "bin"), str(tmp_path / "usr" / "bin")])
    return tmp_path, str(venv), search


def test_lookup_skips_the_venv_python3_first_on_path(tree):
    root, venv, search = tree
    found, warnings = find_interpreters(config(), search, venv)
    assert found == {"node": str(root / "usr" / "bin" / "node"), "python3": str(root / "usr" / "bin" / "python3")}
    assert warnings == []


def test_without_a_venv_the_first_python3_wins(tree):
    _, venv, search = tree
    found, _ = find_interpreters(config(), search, None)
    assert found["python3"] == os.path.join(venv, "bin", "python3")


def test_a_link_into_the_venv_is_skipped_by_its_real_path(tree):
    root, venv, _ = tree
    os.makedirs(root / "links")
    os.symlink(os.path.join(venv, "bin", "python3"), root / "links" / "python3")
    found, _ = find_interpreters(config(), str(root / "links"), venv)
    assert "python3" not in found


def test_a_venv_named_through_a_link_is_still_recognised(tree):
    root, venv, _ = tree
    os.symlink(venv, root / "venv-link")
    found, _ = find_interpreters(config(), os.path.join(venv, "bin"), str(root / "venv-link"))
    assert "python3" not in found


def test_a_script_on_path_is_a_shim_and_skipped_with_a_warning(tree):
    # A pyenv or asdf shim chooses the interpreter from files in the cwd, the skill's directory.
    root, venv, search = tree
    shim(root / "shims" / "python3"), shim(root / "shims" / "node")
    found, warnings = find_interpreters(config(), os.pathsep.join([str(root / "shims"), search]), venv)
    assert found == {"node": str(root / "usr" / "bin" / "node"), "python3": str(root / "usr" / "bin" / "python3")}
    assert warnings == [
        ConfigWarning("PATH", (
            "the first node on PATH is a script, not an interpreter (a version manager's shim, which would let a "
            f"skill's own files pick the interpreter), so the lookup skipped it and node is {root}/usr/bin/node; set "
            "MCP_SKILL_NODE to the interpreter scripts should run on"
        )),
        ConfigWarning("PATH", (
            "the first python3 on PATH is a script, not an interpreter (a version manager's shim, which would let a "
            f"skill's own files pick the interpreter), so the lookup skipped it and python3 is {root}/usr/bin/python3; "
            "set MCP_SKILL_PYTHON to the interpreter scripts should run on"
        )),
    ]  # fmt: skip
    assert not any(str(root / "shims") in warning.problem for warning in warnings)  # PATH's value is not quoted


def test_with_only_shims_on_path_the_interpreter_is_unavailable(tmp_path):
    first, second = shim(tmp_path / "a" / "python3"), shim(tmp_path / "b" / "python3")
    found, warnings = find_interpreters(config(), f"{tmp_path / 'a'}:{tmp_path / 'b'}", None)
    assert found == {}
    assert warnings[0].problem.startswith("the first 2 python3 on PATH are scripts, not an interpreter")
    assert "so the lookup skipped them and python3 is unavailable" in warnings[0].problem
    assert str(first) not in warnings[0].problem and str(second) not in warnings[0].problem
    assert "python3 is unavailable; set MCP_SKILL_PYTHON" in warnings[0].problem


def test_an_execute_only_interpreter_is_run_as_one_though_its_first_bytes_cannot_be_read():
    # Hardened hosts ship interpreters mode 0711: the shim check cannot read them, and that is no reason to skip
    # them. As uid 10001, since root reads any file.
    base = world_readable_dir()
    try:
        node = executable(base / "bin" / "node", mode=0o711)
        os.chmod(base / "bin", 0o755)
        found, warnings = as_unprivileged(lambda: find_interpreters(config(), str(base / "bin"), None))
    finally:
        shutil.rmtree(base)
    assert (found, warnings) == ({"node": node}, [])


def test_a_shim_named_by_the_variable_is_the_operators_choice(tree):
    root, venv, search = tree
    chosen = shim(root / "shims" / "python3")
    assert find_interpreters(config(MCP_SKILL_PYTHON=chosen), search, venv) == ({"python3": chosen, "node": str(root / "usr" / "bin" / "node")}, [])


def test_missing_interpreters_are_not_listed(tmp_path):
    found, warnings = find_interpreters(config(), str(tmp_path), None)
    assert (found, warnings) == ({}, [])
    assert find_interpreters(config(), None, None) == ({}, [])


def test_lookup_skips_directories_non_executables_and_relative_entries(tmp_path):
    os.makedirs(tmp_path / "a" / "node")
    executable(tmp_path / "b" / "node", mode=0o644)
    executable(tmp_path / "c" / "node")
    search = os.pathsep.join(["", "relative", str(tmp_path / "a"), str(tmp_path / "b"), str(tmp_path / "c")])
    found, _ = find_interpreters(config(), search, None)
    assert found == {"node": str(tmp_path / "c" / "node")}


def test_override_is_authoritative_with_no_fallback(tree):
    root, venv, search = tree
    node = executable(root / "opt" / "node")
    found, warnings = find_interpreters(config(MCP_SKILL_NODE=node, MCP_SKILL_PYTHON="/nope/python3"), search, venv)
    assert found == {"node": node}
    assert warnings == [ConfigWarning(
        "MCP_SKILL_PYTHON", "not an existing, executable regular file; python3 is unavailable"
    )]


def test_relative_override_is_unavailable(tree):
    _, venv, search = tree
    found, warnings = find_interpreters(config(MCP_SKILL_PYTHON="usr/bin/python3"), search, venv)
    assert "python3" not in found
    assert warnings == [ConfigWarning("MCP_SKILL_PYTHON", "not an absolute path; python3 is unavailable")]


def test_override_inside_the_venv_is_unavailable(tree):
    _, venv, search = tree
    found, warnings = find_interpreters(config(MCP_SKILL_PYTHON=os.path.join(venv, "bin", "python3")), search, venv)
    assert "python3" not in found
    assert warnings == [
        ConfigWarning("MCP_SKILL_PYTHON", "inside the server's virtual environment; python3 is unavailable")
    ]


def test_the_venv_reached_through_a_linked_directory_is_still_the_venv(tree):
    # A real venv's bin/python3 links to the base interpreter, and Python finds pyvenv.cfg beside the path it was
    # run by: through a link to the venv's directory, neither that path nor the link's target looks inside it.
    root, venv, _ = tree
    os.remove(os.path.join(venv, "bin", "python3"))
    os.symlink(root / "usr" / "bin" / "python3", os.path.join(venv, "bin", "python3"))
    os.symlink(venv, root / "venv-link")
    through_link = str(root / "venv-link" / "bin" / "python3")
    search = os.pathsep.join([str(root / "venv-link" / "bin"), str(root / "usr" / "bin")])
    found, _ = find_interpreters(config(), search, venv)
    assert found["python3"] == str(root / "usr" / "bin" / "python3")
    found, warnings = find_interpreters(config(MCP_SKILL_PYTHON=through_link), search, venv)
    assert "python3" not in found
    assert warnings == [
        ConfigWarning("MCP_SKILL_PYTHON", "inside the server's virtual environment; python3 is unavailable")
    ]


def test_override_linking_to_a_directory_is_unavailable(tree):
    root, _, search = tree
    os.symlink(root / "usr", root / "node-dir")
    found, warnings = find_interpreters(config(MCP_SKILL_NODE=str(root / "node-dir")), search, None)
    assert "node" not in found
    assert [w.variable for w in warnings] == ["MCP_SKILL_NODE"]


def test_override_link_to_an_executable_is_followed(tree):
    root, _, search = tree
    os.symlink(root / "usr" / "bin" / "node", root / "node-link")
    found, _ = find_interpreters(config(MCP_SKILL_NODE=str(root / "node-link")), search, None)
    assert found["node"] == str(root / "node-link")


@pytest.mark.parametrize("in_venv", [True, False])
def test_server_venv_prefix_is_the_venv_or_none_on_a_base_interpreter(monkeypatch, in_venv):
    # On its base interpreter the server has no venv to keep scripts out of: its prefix (/usr) must not count as one.
    monkeypatch.setattr(sys, "prefix", "/srv/venv" if in_venv else "/usr")
    monkeypatch.setattr(sys, "base_prefix", "/usr")
    assert server_venv_prefix() == ("/srv/venv" if in_venv else None)


def test_a_sibling_sharing_the_venvs_name_as_a_prefix_is_not_inside_it(tmp_path):
    (tmp_path / "venv").mkdir()
    assert _inside(str(tmp_path / "venv2" / "bin" / "python3"), str(tmp_path / "venv")) is False
    assert _inside(str(tmp_path / "venv" / "bin" / "python3"), str(tmp_path / "venv")) is True


def test_only_python3_is_kept_out_of_the_servers_venv(tree):
    # §2.5: the rule is python3's alone; a node installed in the venv (nodeenv does so) is the deployment's node.
    root, venv, _ = tree
    node = executable(os.path.join(venv, "bin", "node"))
    found, _ = find_interpreters(config(), os.path.join(venv, "bin"), venv)
    assert found == {"node": node}
    found, warnings = find_interpreters(config(MCP_SKILL_NODE=node), str(root / "usr" / "bin"), venv)
    assert (found["node"], warnings) == (node, [])


def test_a_relative_path_entry_is_skipped_even_when_the_cwd_holds_an_interpreter(tmp_path, monkeypatch):
    executable(tmp_path / "node")
    executable(tmp_path / "bin" / "python3")
    monkeypatch.chdir(tmp_path)
    found, _ = find_interpreters(config(), os.pathsep.join(["", ".", "bin"]), None)
    assert found == {}


@pytest.mark.skipif(sys.prefix == sys.base_prefix, reason="the server must run in a virtual environment")
@pytest.mark.parametrize(("named", "problem"), [
    (sys.executable, "inside the server's virtual environment; python3 is unavailable"),
    ("python3", "not an absolute path; python3 is unavailable"),
])  # fmt: skip
def test_the_real_server_refuses_its_own_venv_python_or_a_relative_one(tmp_path, named, problem):
    # §17 #18 in a real process: the server runs from this venv, and a python3 that is usable on its own (the venv's
    # interpreter; a bare name PATH would find) is still refused, with one warning naming the variable only.
    environ = clean_environ(SKILLS_DIR=str(tmp_path), MCP_SKILL_PYTHON=named, PATH=os.path.dirname(sys.executable))
    with running([sys.executable, "-m", "skill_mcp"], environ, cwd=str(tmp_path)) as client:
        legacy_handshake(client)
        listed = tool_payload(client.request("tools/call", {"name": "skill_list", "arguments": {}}))
        client.close_stdin()
        assert client.wait() == 0
    assert "python3" not in listed["interpreters"]
    warnings = [(e["variable"], e["problem"]) for e in client.log_events() if e["event"] == "config.warning"]
    assert warnings == [("MCP_SKILL_PYTHON", problem)]
