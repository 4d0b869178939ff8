#!/usr/bin/env python3
"""Tiny in-memory server of TENT's HTTP metadata protocol, for the tests.

GET /<any path>?key=K     -> 200 and the stored value, 404 when absent
PUT /<any path>?key=K     -> stores the request body, 200
DELETE /<any path>?key=K  -> 200 (404 when absent)

Usage: http_meta_server.py PORT [CERT KEY [CA]]  (binds 127.0.0.1; prints
"ready" once listening).  With CERT and KEY it serves https; with CA too it
requires a client certificate signed by CA.  State lives in memory only: a restart forgets every key."""
import ssl
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

STORE = {}
LOCK = threading.Lock()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):  # quiet
        pass

    def _key(self):
        q = parse_qs(urlsplit(self.path).query)
        keys = q.get("key")
        if not keys or not keys[0]:
            self._reply(400, b"missing key")
            return None
        return keys[0]

    def _reply(self, code, body=b""):
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Content-Type", "application/octet-stream")
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        key = self._key()
        if key is None:
            return
        with LOCK:
            val = STORE.get(key)
        if val is None:
            self._reply(404, b"not found")
        else:
            self._reply(200, val)

    def do_PUT(self):
        key = self._key()
        if key is None:
            return
        n = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(n) if n > 0 else b""
        with LOCK:
            STORE[key] = body
        self._reply(200, b"ok")

    def do_DELETE(self):
        key = self._key()
        if key is None:
            return
        with LOCK:
            found = STORE.pop(key, None) is not None
        self._reply(200 if found else 404, b"")


def main():
    port = int(sys.argv[1])
    srv = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    srv.daemon_threads = True
    if len(sys.argv) >= 4:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(sys.argv[2], sys.argv[3])
        if len(sys.argv) >= 5:
            ctx.verify_mode = ssl.CERT_REQUIRED
            ctx.load_verify_locations(sys.argv[4])
        srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    print("ready", flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    main()
