#!/usr/bin/env python3
"""Egress probe for the appliance tests (SPEC §15.4, §15.6); stdlib only, not copied into the image.

  egress-probe.py check [--expect-uid N] [--expect-nft-denied] [--loopback] HOST:PORT=open|blocked ...
  egress-probe.py serve --bind ADDR --port PORT

`check` prints one line per target and exits 0 only if every expectation holds (1 otherwise,
2 on a usage error). `serve` is a plain HTTP listener that answers every GET with 200.
"""

from __future__ import annotations

import argparse
import errno
import http.server
import os
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

CONNECT_TIMEOUT = 3.0
# A refused connection reached the peer, so it proves nothing about the fence; it usually
# means the listener is not up yet, so it is retried for this long before it counts.
REFUSED_RETRY_SECONDS = 10.0
# Errors a local output drop (EPERM/EACCES) or a silent drop (timeout) produces.
BLOCKED_ERRNOS = {errno.EPERM, errno.EACCES, errno.ENETUNREACH, errno.EHOSTUNREACH}
TAMPER_TABLE = "skill_egress_probe_tamper"


def parse_target(text: str) -> tuple[str, int, str]:
    where, sep, expect = text.rpartition("=")
    if not sep or expect not in ("open", "blocked"):
        raise ValueError(f"target {text!r} must end in =open or =blocked")
    host, sep, port = where.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"target {text!r} must be HOST:PORT=open|blocked")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host, int(port), expect


def attempt(host: str, port: int) -> tuple[str, str]:
    """One connect: ("CONNECTED"|"BLOCKED"|"REFUSED"|"DNS FAIL", detail)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        return "DNS FAIL", str(exc)
    family, socktype, proto, _, addr = infos[0]
    with socket.socket(family, socktype, proto) as sock:
        sock.settimeout(CONNECT_TIMEOUT)
        try:
            sock.connect(addr)
        except socket.timeout:
            return "BLOCKED", f"{addr[0]}: no answer within {CONNECT_TIMEOUT:g} s"
        except ConnectionRefusedError:
            return "REFUSED", f"{addr[0]}: connection refused (the packet got through)"
        except OSError as exc:
            if exc.errno in BLOCKED_ERRNOS:
                return "BLOCKED", f"{addr[0]}: {os.strerror(exc.errno)}"
            return "ERROR", f"{addr[0]}: {exc}"
    return "CONNECTED", addr[0]


def probe(host: str, port: int) -> tuple[str, str]:
    deadline = time.monotonic() + REFUSED_RETRY_SECONDS
    while True:
        status, detail = attempt(host, port)
        if status != "REFUSED" or time.monotonic() >= deadline:
            return status, detail
        time.sleep(0.25)


def loopback_listener() -> tuple[socket.socket, int]:
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(8)

    def accept_forever() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            conn.close()

    threading.Thread(target=accept_forever, daemon=True).start()
    return server, server.getsockname()[1]


def nft_change_denied() -> tuple[bool, str]:
    """Try a harmless ruleset change; True when the kernel refuses it with EPERM."""
    try:
        proc = subprocess.run(
            ["nft", "add", "table", "inet", TAMPER_TABLE],
            capture_output=True, text=True, timeout=10,
        )
    except FileNotFoundError:
        return False, "nft not found, so the denial could not be shown"
    if proc.returncode == 0:
        subprocess.run(["nft", "delete", "table", "inet", TAMPER_TABLE], capture_output=True)
        return False, "nft accepted a ruleset change"
    err = " ".join(proc.stderr.split())
    if "Operation not permitted" in err:
        return True, "Operation not permitted"
    return False, f"nft failed for another reason: {err}"


def check(args: argparse.Namespace) -> int:
    try:
        targets = [parse_target(t) for t in args.targets]
    except ValueError as exc:
        print(f"usage error: {exc}", file=sys.stderr)
        return 2
    ok = True

    if args.expect_uid is not None:
        uid, euid = os.getuid(), os.geteuid()
        good = uid == euid == args.expect_uid
        ok &= good
        print(f"UID {uid} (euid {euid}) expected {args.expect_uid}: {'ok' if good else 'FAIL'}")

    if args.expect_nft_denied:
        good, detail = nft_change_denied()
        ok &= good
        print(f"NFT {'DENIED' if good else 'NOT DENIED'} ({detail}) expected denied: "
              f"{'ok' if good else 'FAIL'}")

    if args.loopback:
        server, port = loopback_listener()
        targets.insert(0, ("127.0.0.1", port, "open"))

    # Targets are probed concurrently so a run of blocked ones costs one timeout, not many.
    with ThreadPoolExecutor(max_workers=max(1, len(targets))) as pool:
        results = list(pool.map(lambda t: probe(t[0], t[1]), targets))
    for (host, port, expect), (status, detail) in zip(targets, results):
        good = (status == "CONNECTED") if expect == "open" else (status == "BLOCKED")
        ok &= good
        print(f"{status} {host}:{port} ({detail}) expected {expect}: {'ok' if good else 'FAIL'}")

    if args.loopback:
        server.close()
    print("PROBE PASS" if ok else "PROBE FAIL")
    return 0 if ok else 1


class QuietHandler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 (http.server naming)
        body = b"egress-probe\n"
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass


def serve(args: argparse.Namespace) -> int:
    family = socket.AF_INET6 if ":" in args.bind else socket.AF_INET
    server_class = type("Server", (http.server.ThreadingHTTPServer,), {"address_family": family})
    with server_class((args.bind, args.port), QuietHandler) as httpd:
        print(f"LISTENING {args.bind}:{args.port} uid {os.getuid()}", flush=True)
        httpd.serve_forever()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="egress-probe.py", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="mode", required=True)
    p_check = sub.add_parser("check", help="connect to targets and compare with expectations")
    p_check.add_argument("--expect-uid", type=int, help="the probe must run as this uid")
    p_check.add_argument("--expect-nft-denied", action="store_true",
                         help="a ruleset change with nft must fail with EPERM")
    p_check.add_argument("--loopback", action="store_true",
                         help="start a listener on 127.0.0.1 and expect it open")
    p_check.add_argument("targets", nargs="*", metavar="HOST:PORT=open|blocked")
    p_serve = sub.add_parser("serve", help="plain HTTP listener")
    p_serve.add_argument("--bind", required=True)
    p_serve.add_argument("--port", type=int, required=True)
    args = parser.parse_args(argv)
    return check(args) if args.mode == "check" else serve(args)


if __name__ == "__main__":
    sys.exit(main())
