"""Serve one viewer page on the loopback interface (127.0.0.1 only), for ``bdh viz --serve``."""

from __future__ import annotations

import errno
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from bdh.errors import UserError

HOST = "127.0.0.1"
PATHS = ("/", "/index.html", "/viz.html")


class PageServer(ThreadingHTTPServer):
    """A threading HTTP server holding one page (``page``, bytes; it may be replaced while serving)."""

    daemon_threads = True
    page: bytes = b""


class _Handler(BaseHTTPRequestHandler):
    """GET / returns the server's page; anything else is 404. No logging of requests."""

    server: PageServer

    def do_GET(self) -> None:
        page = self.server.page
        if self.path.split("?", 1)[0] not in PATHS:
            self.send_error(404, "only / is served")
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(page)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(page)

    def do_HEAD(self) -> None:
        self.send_response(200 if self.path.split("?", 1)[0] in PATHS else 404)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.end_headers()

    def log_message(self, format: str, *args) -> None:
        return


def make_server(page: bytes, port: int = 0) -> PageServer:
    """An HTTP server of ``page`` on 127.0.0.1:``port`` (0: any free); ValueError when the port is taken or refused."""
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise UserError(f"viz: port must be an integer in 0..65535, got {port!r}")
    try:
        server = PageServer((HOST, port), _Handler)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise UserError(
                f"viz: port {port} on {HOST} is in use; choose another with --port, or 0 for a free one"
            ) from None
        if exc.errno == errno.EACCES:
            raise UserError(
                f"viz: not allowed to listen on port {port}; choose a port above 1023, or 0 for a free one"
            ) from None
        raise UserError(f"viz: cannot listen on {HOST}:{port} ({exc.strerror})") from None
    server.page = page
    return server


def address(server: PageServer) -> str:
    """The page's URL, http://127.0.0.1:PORT/."""
    host, port = server.server_address[:2]
    return f"http://{host}:{port}/"
