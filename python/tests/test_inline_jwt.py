"""The node's JWT verifier (``function = "jwt"`` in ``[[attach]]``, docs/inline.md) in front of
unmodified HTTP servers, driven by unmodified clients: Debian's ``curl`` and ``wrk``.

The tokens are made here with Python's own ``hmac`` (an implementation independent of the
node's). The backends are Python's stock ``http.server`` and a keep-alive HTTP/1.1 server on the
same library (crates/node/tests/support/http_backend.py).
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
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from offrac import wait_listening

from _util import free_port
from conftest import Node

SECRET = b"python test secret, 32 bytes...."
ROOT = Path(__file__).resolve().parents[2]
BACKEND = ROOT / "crates" / "node" / "tests" / "support" / "http_backend.py"
CURL = shutil.which("curl")
pytestmark = pytest.mark.skipif(CURL is None, reason="curl is not installed (apt-get install curl)")


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def hs256(claims: dict[str, object], header: dict[str, object] | None = None, key: bytes = SECRET) -> str:
    h = b64(json.dumps(header or {"alg": "HS256", "typ": "JWT"}).encode())
    p = b64(json.dumps(claims).encode())
    sig = hmac.new(key, f"{h}.{p}".encode(), hashlib.sha256).digest()
    return f"{h}.{p}.{b64(sig)}"


class Backend:
    def __init__(self, args: list[str], cwd: Path | None = None) -> None:
        self.port = free_port()
        self.proc = subprocess.Popen(
            [*args, str(self.port)], cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        wait_listening(("127.0.0.1", self.port), timeout=10)

    def served(self) -> int:
        out = subprocess.run(
            [str(CURL), "-s", f"http://127.0.0.1:{self.port}/count"], capture_output=True, text=True
        )
        return int(out.stdout)

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()


@pytest.fixture
def echo() -> Iterator[Backend]:
    b = Backend([sys.executable, str(BACKEND)])
    yield b
    b.stop()


@pytest.fixture
def stock(tmp_path: Path) -> Iterator[Backend]:
    (tmp_path / "page.html").write_text("<p>stock page</p>\n")
    b = Backend([sys.executable, "-m", "http.server", "--bind", "127.0.0.1"], cwd=tmp_path)
    yield b
    b.stop()


def gate(start_node: Callable[..., Node], backend: Backend, extra: str = "") -> str:
    node = start_node(
        '[metrics]\nlisten = ""\n[[attach]]\nlisten = "127.0.0.1:0"\nfunction = "jwt"\n'
        f'backend = "127.0.0.1:{backend.port}"\nsecret = "{SECRET.decode()}"\n{extra}'
    )
    return f"http://{node.info['attach'][0]}"


def curl(*args: str) -> subprocess.CompletedProcess[str]:
    assert CURL is not None
    return subprocess.run([CURL, "-s", *args], capture_output=True, text=True, timeout=30)


def test_curl_with_good_and_bad_tokens(start_node: Callable[..., Node], echo: Backend) -> None:
    url = gate(start_node, echo, 'issuer = "offrac-tests"\naudience = "api"\n')
    now = time.time()
    good = hs256({"sub": "u", "iss": "offrac-tests", "aud": "api", "exp": now + 300})
    ok = curl("-H", f"Authorization: Bearer {good}", f"{url}/hello")
    assert ok.stdout == "hello /hello"
    bad = {
        "forged": hs256({"iss": "offrac-tests", "aud": "api", "exp": now + 300}, key=b"other"),
        "expired": hs256({"iss": "offrac-tests", "aud": "api", "exp": now - 60}),
        "not yet valid": hs256({"iss": "offrac-tests", "aud": "api", "exp": now + 300, "nbf": now + 60}),
        "wrong issuer": hs256({"iss": "evil", "aud": "api", "exp": now + 300}),
        "wrong audience": hs256({"iss": "offrac-tests", "aud": "web", "exp": now + 300}),
        "alg none": hs256({"exp": now + 300}, {"alg": "none"}).rsplit(".", 1)[0] + ".",
        "RS256 label": hs256({"iss": "offrac-tests", "aud": "api", "exp": now + 300}, {"alg": "RS256"}),
        "garbage": "x.y.z",
    }
    before = echo.served()
    for what, token in bad.items():
        out = curl("-i", "-H", f"Authorization: Bearer {token}", f"{url}/hello")
        assert out.stdout.startswith("HTTP/1.1 401"), (what, out.stdout)
        assert re.search(
            r'(?im)^www-authenticate: Bearer realm="offrac", error="invalid_token"', out.stdout
        ), what
    missing = curl("-i", f"{url}/hello")
    assert missing.stdout.startswith("HTTP/1.1 401")
    assert re.search(r'(?im)^www-authenticate: Bearer realm="offrac"$', missing.stdout)
    assert echo.served() == before, "refused requests never reach the backend"


def test_curl_keeps_one_connection_posts_bodies_and_reads_the_stock_server(
    start_node: Callable[..., Node], echo: Backend, stock: Backend, tmp_path: Path
) -> None:
    token = hs256({"sub": "u", "exp": time.time() + 300})
    auth = f"Authorization: Bearer {token}"
    url = gate(start_node, echo)
    # Three URLs in one curl run reuse one connection: one connect in all.
    urls = [arg for i in range(3) for arg in ("-o", "/dev/null", f"{url}/{i}")]
    out = curl("-H", auth, "-w", "%{http_code} %{num_connects}\n", *urls)
    assert out.stdout.split("\n")[:3] == ["200 1", "200 0", "200 0"]
    body = tmp_path / "body.bin"
    body.write_bytes(bytes(range(256)) * 4096)
    # curl sends Expect: 100-continue for a body this size; the node answers it.
    out = subprocess.run(
        [str(CURL), "-s", "-H", auth, "--data-binary", f"@{body}", f"{url}/echo"],
        capture_output=True,
        timeout=30,
    )
    assert out.stdout == body.read_bytes()
    # Refused with a body announced: 401 at once (curl does not send the body).
    out = curl("-o", "/dev/null", "-w", "%{http_code}", "--data-binary", f"@{body}", f"{url}/echo")
    assert out.stdout == "401"
    # Chunked request bodies are refused clearly.
    out = curl("-i", "-H", auth, "-H", "Transfer-Encoding: chunked", "--data-binary", "abc", f"{url}/echo")
    assert out.stdout.startswith("HTTP/1.1 411"), out.stdout
    stock_url = gate(start_node, stock)
    out = curl("-H", auth, f"{stock_url}/page.html", f"{stock_url}/page.html")
    assert out.stdout == "<p>stock page</p>\n" * 2


def test_backend_down_is_502_and_the_node_recovers(start_node: Callable[..., Node], echo: Backend) -> None:
    token = hs256({"sub": "u", "exp": time.time() + 300})
    url = gate(start_node, echo)
    echo.stop()
    out = curl("-o", "/dev/null", "-w", "%{http_code}", "-H", f"Authorization: Bearer {token}", f"{url}/x")
    assert out.stdout == "502"
    assert curl("-o", "/dev/null", "-w", "%{http_code}", f"{url}/x").stdout == "401"


@pytest.mark.skipif(shutil.which("wrk") is None, reason="wrk is not installed (apt-get install wrk)")
def test_wrk_through_the_node(start_node: Callable[..., Node], echo: Backend) -> None:
    """wrk (HTTP/1.1 keep-alive) through the node: valid tokens all answered 200 by the
    backend; invalid ones all 401 without reaching it."""
    url = gate(start_node, echo)
    wrk = shutil.which("wrk")
    assert wrk is not None

    def run(token: str) -> str:
        out = subprocess.run(
            [wrk, "-t1", "-c4", "-d1s", "-H", f"Authorization: Bearer {token}", f"{url}/w"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert out.returncode == 0, out.stderr
        return out.stdout

    good = run(hs256({"sub": "u", "exp": time.time() + 300}))
    assert "Non-2xx" not in good and "Socket errors" not in good, good
    total = re.search(r"(\d+) requests in", good)
    assert total is not None and int(total.group(1)) > 100, good
    time.sleep(0.3)  # requests wrk abandoned at its deadline may still be reaching the backend
    before = echo.served()
    bad = run(hs256({"sub": "u", "exp": time.time() - 1}))
    refused = re.search(r"(\d+) requests in", bad)
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", bad)
    assert refused is not None and non2xx is not None and refused.group(1) == non2xx.group(1), bad
    assert echo.served() == before
