"""The transport's floor: no SDK, no validation, no encoding at request time. Each request line is answered with
bytes built at start: `resources/list` with the same 500-resource page as `bare_server.py --resources 500`, anything
else with the dummy tool's result. The difference between the two is what moving one page over the pipe costs any
stdio server, whatever it does before it writes.
"""

from __future__ import annotations

import json
import sys

from trees import resource_page

DUMMY = {"content": [{"type": "text", "text": '{"ok":true}'}], "isError": False}


def answer(request_id: object, result_json: bytes) -> bytes:
    return b'{"jsonrpc":"2.0","id":' + json.dumps(request_id).encode() + b',"result":' + result_json + b"}\n"


def main() -> None:
    page, dummy = (json.dumps(result, separators=(",", ":")).encode() for result in (resource_page(500), DUMMY))
    for line in sys.stdin.buffer:
        request = json.loads(line)
        if "id" in request:
            sys.stdout.buffer.write(answer(request["id"], page if request["method"] == "resources/list" else dummy))
            sys.stdout.buffer.flush()


if __name__ == "__main__":
    main()
