"""Where skill-mcp's cold start goes: `python -X importtime` of our server vs the bare server.

    .venv/bin/python bench/importtime.py [--runs 7] [--src DIR] [--top 25]

Both servers start with stdin at EOF (/dev/null), so each boots, answers nothing and exits;
`-X importtime` prints one line per module (self and cumulative microseconds, nested by
indentation, children before their parent). Runs are interleaved; per-module medians are shown.
For every module ours imports and the bare server does not, the nearest skill_mcp module above it
in the import tree says which of our imports pulls it. Probes time single imports in a fresh
interpreter, for the floor (`pass`) and the big dependencies in isolation.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)

PROBES = {
    "interpreter floor (-c pass)": "pass",
    "import anyio": "import anyio",
    "import pydantic": "import pydantic",
    "import mcp_types": "import mcp_types",
    "import mcp.server.lowlevel": "import mcp.server.lowlevel",
    "import mcp.server.lowlevel + stdio": "import mcp.server.lowlevel, mcp.server.stdio",
    "import structlog": "import structlog",
    "import ruamel.yaml": "import ruamel.yaml",
}


def env(work: str) -> dict[str, str]:
    return {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": work,
        "LANG": "C.UTF-8",
        "TMPDIR": work,
        "PYTHONHASHSEED": "0",
    }


def parse(stderr: str) -> list[tuple[str, int, int, int]]:
    """(module, level, self_us, cumulative_us) in printed order."""
    rows = []
    for line in stderr.splitlines():
        if not line.startswith("import time:") or "[us]" in line:
            continue
        self_us, cumulative, name = line.split(":", 1)[1].split("|")
        name = name.rstrip()
        level = (len(name) - len(name.lstrip(" ")) - 1) // 2  # one space, then two per nesting level
        rows.append((name.strip(), level, int(self_us), int(cumulative)))
    return rows


def parents(rows: list[tuple[str, int, int, int]]) -> dict[str, str | None]:
    """Module -> the module whose import pulled it (post-order: children come before their parent)."""
    pending: dict[int, list[str]] = defaultdict(list)
    parent: dict[str, str | None] = {}
    for name, level, _, _ in rows:
        for child in pending.pop(level + 1, []):
            if child != name:
                parent.setdefault(child, name)
        pending[level].append(name)
    for names in pending.values():
        for name in names:
            parent.setdefault(name, None)
    return parent


def our_puller(module: str, parent: dict[str, str | None]) -> str:
    chain: list[str] = []
    node = parent.get(module)
    while node is not None and node not in chain:  # a name printed twice must not loop
        chain.append(node)
        if node.startswith("skill_mcp"):
            return node
        node = parent.get(node)
    return "(top level)" if not chain else chain[-1]


def run(argv: list[str], cwd: str, work: str) -> tuple[float, str]:
    start = time.perf_counter()
    done = subprocess.run(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=env(work),
        cwd=cwd,
        text=True,
        check=False,
    )
    return time.perf_counter() - start, done.stderr


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--src", default=REPO, help="directory holding the skill_mcp package (default: this checkout)")
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--top", type=int, default=25)
    options = parser.parse_args()
    work = tempfile.mkdtemp(prefix="skill-mcp-importtime-")
    try:
        return report(options, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def report(options: argparse.Namespace, work: str) -> int:
    src = os.path.abspath(options.src)
    commands = {
        "ours": ([options.python, "-X", "importtime", "-m", "skill_mcp"], src),
        "bare": ([options.python, "-X", "importtime", os.path.join(HERE, "bare_server.py")], work),
    }
    walls: dict[str, list[float]] = defaultdict(list)
    cumulative: dict[str, dict[str, list[int]]] = {"ours": defaultdict(list), "bare": defaultdict(list)}
    selfs: dict[str, list[int]] = defaultdict(list)
    tree: dict[str, str | None] = {}
    for which in commands:  # one discarded run each: warm bytecode caches
        run(*commands[which], work)
    for r in range(options.runs):
        for which in commands if r % 2 == 0 else reversed(list(commands)):
            wall, stderr = run(*commands[which], work)
            rows = parse(stderr)
            walls[which].append(wall)
            for name, _, self_us, cum_us in rows:
                cumulative[which][name].append(cum_us)
                if which == "ours":
                    selfs[name].append(self_us)
            if which == "ours":
                tree = parents(rows)
        for label, code in PROBES.items():
            walls["probe: " + label].append(run([options.python, "-c", code], work, work)[0])

    med = statistics.median
    ours = {name: med(v) for name, v in cumulative["ours"].items()}
    bare = {name: med(v) for name, v in cumulative["bare"].items()}
    print(
        f"wall, spawn -> exit at EOF (median of {options.runs}): ours {med(walls['ours']) * 1e3:.0f} ms, "
        f"bare {med(walls['bare']) * 1e3:.0f} ms"
    )
    print(
        f"sum of top-level cumulative import time: ours {sum(ours[n] for n, p in tree.items() if p is None) / 1e3:.0f} ms"
    )
    print("\nProbes (fresh interpreter, wall ms, median):")
    for label in PROBES:
        print(f"  {label:<40}{med(walls['probe: ' + label]) * 1e3:8.0f}")

    print(f"\nTop {options.top} modules by cumulative import time in our server (ms; * = also imported by bare):")
    for name, value in sorted(ours.items(), key=lambda kv: -kv[1])[: options.top]:
        mark = "*" if name in bare else " "
        print(f"  {value / 1e3:8.1f}  {mark} {name}  <- {tree.get(name) or '(top level)'}")

    print("\nImported by ours and not by bare, outermost only (ms cumulative; pulled by):")
    extra = [n for n in ours if n not in bare]
    outer = [n for n in extra if tree.get(n) is None or tree.get(n) in bare or tree.get(n, "").startswith("skill_mcp")]
    outer = [n for n in outer if not n.startswith("skill_mcp")]
    for name in sorted(outer, key=lambda n: -ours[n])[: options.top]:
        print(f"  {ours[name] / 1e3:8.1f}  {name}  <- {our_puller(name, tree)}")
    print("\nOur own modules (ms cumulative, self):")
    for name in sorted((n for n in ours if n.startswith("skill_mcp")), key=lambda n: -ours[n]):
        print(f"  {ours[name] / 1e3:8.1f} {med(selfs[name]) / 1e3:6.1f}  {name}  <- {tree.get(name) or '(top level)'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
