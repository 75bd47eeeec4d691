"""A throttling HTTP proxy for S3 tests: on loopback, in front of a real S3
server (`rclone serve s3`), it answers chosen requests itself with what S3
answers an overloaded client (HTTP 503, an <Error> whose <Code> is
SlowDown) and forwards every other one unchanged (the Host header included,
so SigV4 signatures made for the proxy's address still hold upstream).

    proxy = ThrottleProxy("http://127.0.0.1:9000", every=3)   # each 3rd request
    proxy = ThrottleProxy(upstream, burst=(5, 4))    # requests 5..8 (counting from 1)
    proxy = ThrottleProxy(upstream, chance=0.1, seed=7)  # each request with probability 0.1
    proxy = ThrottleProxy(upstream, match=lambda method, path, headers: "/step-" in path)
    url = proxy.start(); ...; proxy.stop()
    proxy.requests, proxy.throttled                  # counts so far

Conditions combine: a request is throttled when it matches `match` (default:
any) and is the every-th one, or in the burst, or drawn by `chance` (when
none is given: every matching request). With several clients at once,
`every` can single one out (two alternating clients and every=2: one of
them gets every 503); `chance` cannot. Used by tests/python/test_object_store.py and
tools/fault_campaign.py's s3 kind (fault `throttle`).
"""

import http.client
import http.server
import random
import threading
import urllib.parse
import uuid

_HOP_BY_HOP = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "expect",
               "te", "trailer", "upgrade"}


class ThrottleProxy:
    def __init__(self, upstream, every=0, burst=None, match=None, chance=0.0, seed=0):
        u = urllib.parse.urlsplit(upstream)
        self.upstream = (u.hostname, u.port or 80)
        self.every, self.burst, self.match, self.chance = every, burst, match, chance
        self._random = random.Random(seed)
        self.requests = 0   # every request seen
        self.throttled = 0  # those answered 503 SlowDown
        self._lock = threading.Lock()
        self._server = None
        self._thread = None

    def start(self):
        """Listens on a port the kernel picks; returns http://127.0.0.1:port."""
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, and 100-continue for large PUTs

            def log_message(self, *args):
                pass

            def _any(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                if proxy._decide(self.command, self.path, self.headers):
                    self._slow_down()
                else:
                    self._forward(body)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _any

            def _slow_down(self):
                resource = urllib.parse.urlsplit(self.path).path
                body = ("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>SlowDown</Code>"
                        "<Message>Please reduce your request rate.</Message><Resource>%s"
                        "</Resource><RequestId>%s</RequestId></Error>" %
                        (resource, uuid.uuid4().hex[:16].upper())).encode()
                self.send_response(503)
                self.send_header("Content-Type", "application/xml")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            def _forward(self, body):
                conn = http.client.HTTPConnection(*proxy.upstream, timeout=60)
                try:
                    conn.putrequest(self.command, self.path, skip_host=True,
                                    skip_accept_encoding=True)
                    for name, value in self.headers.items():
                        if name.lower() not in _HOP_BY_HOP and name.lower() != "content-length":
                            conn.putheader(name, value)
                    if body or self.command in ("PUT", "POST"):
                        conn.putheader("Content-Length", str(len(body)))
                    conn.endheaders(body if body else None)
                    reply = conn.getresponse()
                    data = reply.read()
                    self.send_response(reply.status, reply.reason)
                    for name, value in reply.getheaders():
                        if name.lower() not in _HOP_BY_HOP and name.lower() != "content-length":
                            self.send_header(name, value)
                    length = reply.getheader("Content-Length") if self.command == "HEAD" \
                        else str(len(data))
                    self.send_header("Content-Length", length or "0")
                    self.end_headers()
                    if self.command != "HEAD":
                        self.wfile.write(data)
                finally:
                    conn.close()

        class Server(http.server.ThreadingHTTPServer):
            def handle_error(self, request, client_address):
                pass  # a client killed mid-request (a fault campaign's victim): not news

        self._server = Server(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return "http://127.0.0.1:%d" % self._server.server_address[1]

    def stop(self):
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._thread.join()
            self._server = None

    def _decide(self, method, path, headers):
        with self._lock:
            self.requests += 1
            if self.match is not None and not self.match(method, path, headers):
                return False
            n = self.requests
            if self.every:
                hit = n % self.every == 0
            elif self.burst is not None:
                hit = self.burst[0] <= n < self.burst[0] + self.burst[1]
            elif self.chance:
                hit = self._random.random() < self.chance
            else:
                hit = True
            if hit:
                self.throttled += 1
            return hit
