#!/usr/bin/env python3
"""Issue #16: the JWT (HS256) verifier attached in front of an unmodified HTTP server
(docs/inline.md), NICA's second inline function.

One stock nginx (Debian's, one worker process, a 13-byte static page) and one node fronting it
(``offrac serve --attach "function=jwt,..."``); Debian's ``wrk`` (HTTP/1.1 keep-alive, 4
connections, one thread) runs, alternating, in one run:

- ``direct``: straight at nginx (the token header is sent and ignored): the baseline;
- ``node, valid``: through the node with a valid token: verified, forwarded, relayed;
- ``node, invalid``: through the node with an expired token: answered 401 at the node.

For each: requests/s, p50 and p99 (from ``wrk --latency``), non-2xx answers, and how many
requests reached nginx (its access log's lines), so the invalid ones are shown never to reach
it. Medians over rounds. The node, nginx and wrk share the machine's 2 cores. ``--quick`` runs
one short round.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from _bench import Server, finish, free_port, log, machine, md_table, median

from offrac import wait_listening

HERE = Path(__file__).resolve().parent
QUICK = "--quick" in sys.argv
ROUNDS = 1 if QUICK else 3
SECONDS = 1 if QUICK else 3
CONNECTIONS = 4
SECRET = b"nica-jwt-experiment-key-32-bytes"
CASES = ("direct", "node, valid", "node, invalid")
FIELDS = ["case", "round", "requests", "rate", "p50_us", "p99_us", "non_2xx", "backend_requests"]


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def hs256(claims: dict[str, object]) -> str:
    h = b64(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
    p = b64(json.dumps(claims).encode())
    return f"{h}.{p}.{b64(hmac.new(SECRET, f'{h}.{p}'.encode(), hashlib.sha256).digest())}"


def micros(text: str) -> float:
    m = re.fullmatch(r"([\d.]+)(us|ms|s)", text)
    if m is None:
        raise ValueError(f"wrk latency {text!r}")
    return float(m.group(1)) * {"us": 1.0, "ms": 1e3, "s": 1e6}[m.group(2)]


def wrk(url: str, token: str) -> dict[str, Any]:
    out = subprocess.run(
        [
            "wrk",
            *("-t1", f"-c{CONNECTIONS}", f"-d{SECONDS}s", "--latency"),
            *("-H", f"Authorization: Bearer {token}", url),
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=SECONDS + 30,
    ).stdout

    def grab(pattern: str) -> str:
        m = re.search(pattern, out, re.MULTILINE)
        if m is None:
            raise RuntimeError(f"wrk output without {pattern!r}:\n{out}")
        return m.group(1)

    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    return {
        "requests": int(grab(r"(\d+) requests in")),
        "rate": float(grab(r"Requests/sec:\s+([\d.]+)")),
        "p50_us": micros(grab(r"^\s+50%\s+(\S+)")),
        "p99_us": micros(grab(r"^\s+99%\s+(\S+)")),
        "non_2xx": int(non2xx.group(1)) if non2xx else 0,
    }


def measure() -> list[dict[str, Any]]:
    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    if not Path(nginx).exists() or shutil.which("wrk") is None:
        sys.exit("needs nginx and wrk (apt-get install nginx-light wrk)")
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        (t / "www").mkdir()
        (t / "www" / "index.html").write_text("hello, world\n")
        port = free_port()
        access = t / "access.log"
        (t / "nginx.conf").write_text(
            f"worker_processes 1;\npid {t}/nginx.pid;\nerror_log {t}/error.log;\ndaemon off;\n"
            "events { worker_connections 1024; }\n"
            f"http {{ access_log {access}; client_body_temp_path {t}; proxy_temp_path {t};\n"
            f"  fastcgi_temp_path {t}; uwsgi_temp_path {t}; scgi_temp_path {t};\n"
            f"  keepalive_requests 1000000;\n"
            f"  server {{ listen 127.0.0.1:{port}; root {t}/www; }} }}\n"
        )
        web = subprocess.Popen(
            [nginx, "-c", str(t / "nginx.conf"), "-p", str(t)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        spec = f"listen=127.0.0.1:0,function=jwt,backend=127.0.0.1:{port},secret={SECRET.decode()}"
        args = ["serve", "--listen", "127.0.0.1:0", "--metrics-listen", "", "--attach", spec]
        try:
            wait_listening(("127.0.0.1", port))
            with Server(args, "node") as node:
                attached = str(node.info["attach"][0])
                urls = {"direct": f"http://127.0.0.1:{port}/", "node": f"http://{attached}/"}
                for r in range(ROUNDS):
                    order = CASES if r % 2 == 0 else CASES[::-1]
                    for case in order:
                        exp = time.time() + (600 if case != "node, invalid" else -60)
                        token = hs256({"sub": "bench", "exp": exp})
                        before = count_lines(access)
                        res = wrk(urls["direct" if case == "direct" else "node"], token)
                        time.sleep(0.2)
                        seen = count_lines(access) - before
                        row = {"case": case, "round": r, **res, "backend_requests": seen}
                        log(json.dumps(row))
                        rows.append(row)
        finally:
            web.terminate()
            web.wait()
    return rows


def count_lines(path: Path) -> int:
    try:
        with path.open("rb") as f:
            return sum(1 for _ in f)
    except FileNotFoundError:
        return 0


def med(rows: list[dict[str, Any]], case: str, field: str) -> float:
    return median([float(r[field]) for r in rows if r["case"] == case])


def plot(rows: list[dict[str, Any]]) -> None:
    fig, (a, b) = plt.subplots(1, 2, figsize=(9, 3.5))
    x = list(range(len(CASES)))
    a.bar(x, [med(rows, c, "rate") / 1e3 for c in CASES])
    a.set_title("requests/s (thousands)")
    for i, q in enumerate(("p50_us", "p99_us")):
        b.bar([j + (i - 0.5) * 0.38 for j in x], [med(rows, c, q) for c in CASES], 0.38, label=q[:3])
    b.set_title("latency (µs)")
    b.legend()
    for ax in (a, b):
        ax.set_xticks(x, list(CASES))
    fig.tight_layout()
    fig.savefig(HERE / "plot.png", dpi=120)


def summarize(rows: list[dict[str, Any]]) -> str:
    base = med(rows, "direct", "rate")
    table = [
        (
            c,
            f"{med(rows, c, 'rate'):.0f}",
            f"{med(rows, c, 'rate') / base:.2f}x",
            f"{med(rows, c, 'p50_us'):.0f} / {med(rows, c, 'p99_us'):.0f}",
            f"{med(rows, c, 'non_2xx'):.0f} of {med(rows, c, 'requests'):.0f}",
            f"{med(rows, c, 'backend_requests'):.0f}",
        )
        for c in CASES
    ]
    header = ("case", "req/s", "vs direct", "p50 / p99 µs", "non-2xx answers", "requests nginx saw")
    return (
        "# NICA JWT verifier: through the node vs nginx direct\n\n"
        f"Machine: {machine()}. nginx (1 worker, 13 B static page) and the node on loopback; "
        f"wrk -t1 -c{CONNECTIONS} -d{SECONDS}s --latency with an HS256 bearer token; medians of "
        f"{ROUNDS} rounds, alternating. Command: `python3 experiments/nica_jwt/run.py`.\n\n"
        + md_table(header, table)
        + "\n"
    )


def main() -> None:
    rows = measure()
    finish(HERE, rows, FIELDS, plot, summarize)


if __name__ == "__main__":
    main()
