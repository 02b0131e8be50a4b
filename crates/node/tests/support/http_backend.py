"""A small HTTP/1.1 backend for the JWT gate's tests, on Python's standard ``http.server``
(keep-alive, Content-Length and chunked answers). Usage: ``http_backend.py PORT``.

- ``GET /count``: how many other requests it has served (to show refused requests never reach
  it; ``/count`` itself is not counted);
- ``POST /echo``: the body back, with the request's Authorization header in ``X-Auth``;
- ``GET /chunked``: a chunked answer; ``GET /close``: an answer without length, ended by close;
- ``GET /slow``: answers after two seconds; anything else: ``hello <path>``.
"""

from __future__ import annotations

import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

served = 0
lock = threading.Lock()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Headers and body go out in two writes: without this, Nagle holds the body until the
    # peer's delayed ACK (~40 ms per answer).
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: object) -> None:
        pass

    def _count(self) -> int:
        global served
        with lock:
            n = served
            served += 1
        return n

    def _send(self, body: bytes, status: int = 200) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("X-Auth", self.headers.get("Authorization", "-"))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def do_GET(self) -> None:
        if self.path == "/count":
            with lock:
                n = served
            self._send(str(n).encode())
            return
        self._count()
        if self.path == "/chunked":
            self.send_response(200)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for part in (b"one ", b"two ", b"three"):
                self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
            self.wfile.write(b"0\r\n\r\n")
        elif self.path == "/close":
            self.send_response(200)
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(b"until close")
            self.close_connection = True
        elif self.path == "/slow":
            time.sleep(2)
            self._send(b"slow")
        else:
            self._send(b"hello " + self.path.encode())

    do_HEAD = do_GET

    def do_POST(self) -> None:
        self._count()
        n = int(self.headers.get("Content-Length", "0"))
        self._send(self.rfile.read(n))


if __name__ == "__main__":
    ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
