"""Report what this script was handed: argv, working directory, variable names, interpreter."""

import json
import os
import sys


def handed_names():
    # The exec-time block, not os.environ: Python itself may add LC_CTYPE (PEP 538) after start.
    try:
        with open("/proc/self/environ", "rb") as block:
            return sorted(entry.split(b"=", 1)[0].decode() for entry in block.read().split(b"\0") if entry)
    except OSError:
        return sorted(os.environ)


print(
    json.dumps(
        {
            "argv": sys.argv[1:],
            "cwd": os.getcwd(),
            "envNames": handed_names(),
            "interpreter": f"Python {sys.version.split()[0]}",
            "executable": sys.executable,
        }
    )
)
print("report.py finished", file=sys.stderr)
