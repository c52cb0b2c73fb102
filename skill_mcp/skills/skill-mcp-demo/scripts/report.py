"""Report what this script was handed: argv, working directory, variable names, interpreter."""

import json
import os
import sys

print(
    json.dumps(
        {
            "argv": sys.argv[1:],
            "cwd": os.getcwd(),
            "envNames": sorted(os.environ),
            "interpreter": f"Python {sys.version.split()[0]}",
        }
    )
)
print("report.py finished", file=sys.stderr)
