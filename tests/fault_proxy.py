#!/usr/bin/env python3
"""fault_proxy.py - a loopback HTTP/1.1 proxy in front of http_range_server.py (or any server) that
breaks chosen responses the way networks and object stores do.

Usage: fault_proxy.py UPSTREAM_PORT PORTFILE --fault KIND [--every N] [--after N] [--count N]
                      [--min-bytes B] [--stall S] [--stall-bytes B] [--rate B]
                      [--replace FILE | --replace-cmd CMD]
                      [--log FILE]

Only GETs whose Range asks for at least --min-bytes (default 8192: the loader's data ranges, not
its 8-byte and header probes) are candidates; the i-th candidate (from 1) is broken when i > after
and (i - after) % every == 0, at most --count times (0: no limit). KIND:
  reset     half the body, then a TCP reset (SO_LINGER 0)
  truncate  half the body, then a clean close (the Content-Length is not met)
  503       a 503 Service Unavailable instead of the response (--every 1 --count 3: a burst)
  507, 501  a 507 Insufficient Storage (transient: retried) or a 501 Not Implemented (not retried)
  429       a 429 Too Many Requests with Retry-After: 1
  stall     half the body (--stall-bytes B: B bytes of it, 0 for none), then nothing for --stall
            seconds (default 5), then the rest; logged when the stall starts, with the bytes sent
            before it
  hang      nothing at all (no status line) for --stall seconds, then the connection closed: a
            server that accepted the request and went quiet
  hdrdrip   a 206 status line, then one 1000-byte header line every 0.2 s for --stall seconds,
            never the blank line that ends the headers nor a body, then the connection closed
  bodydrip  the headers, then the body a byte every 0.2 s for --stall seconds, then the
            connection closed: a server that trickles (never idle long enough to stall)
  slow      the headers, then the whole body at --rate bytes/s (in 4 KiB pieces): a range served by a
            slow node, well above any trickle; logged when the body starts
  crhalf    the whole body, its Content-Range saying it ends half-way (bytes A-(A+(B-A)/2)/T)
  crpast    the body asked for, its Content-Range saying it runs to the object's end (A-(T-1)/T)
  crshort   an honest shorter range: the first half of the body, Content-Range and Content-Length
            saying so (a server may send fewer bytes than asked)
  crjunk    crshort's response with 10 more bytes after it on the kept-alive connection, which the
            client then reads as the start of its next response (an "HTTP/0.9" reply)
  flip      the whole body, one byte of it (the middle one) flipped: bytes the store did not hold
            (its stored checksum still the original's), which only --verify can catch
  replace   after the --after-th candidate, FILE is rewritten in place (same size, every byte
            flipped): its ETag and Last-Modified change, as when an object is replaced mid-load;
            --replace-cmd runs a shell command instead (an S3 put of other bytes)
  none      nothing broken (counts only)
HEADs are forwarded as they are, never broken. It also serves as an HTTP proxy (http_proxy=its URL):
an absolute-form request's path goes to the upstream, whatever host it names.
--log appends "<path> <status> <bytes sent> <fault or -> <first byte asked for or -> <unix time>"
per request (for a stall: when it starts).
"""
import argparse
import http.client
import http.server
import os
import re
import socket
import socketserver
import struct
import subprocess
import sys
import threading
import time

A = None
LOCK = threading.Lock()
STATE = {"candidates": 0, "faults": 0, "replaced": False}


def decide(headers):
    """The fault for this request, or None."""
    m = re.fullmatch(r"bytes=(\d+)-(\d+)", (headers.get("Range") or "").strip())
    if not m or int(m.group(2)) - int(m.group(1)) + 1 < A.min_bytes:
        return None
    with LOCK:
        STATE["candidates"] += 1
        i = STATE["candidates"]
        if A.fault == "replace":
            if i > A.after and not STATE["replaced"] and A.replace_cmd:
                subprocess.run(A.replace_cmd, shell=True, check=True)
                STATE["replaced"] = True
                return "replace"
            if i > A.after and not STATE["replaced"]:
                with open(A.replace, "r+b") as f:
                    data = f.read()
                    f.seek(0)
                    f.write(bytes(b ^ 0xFF for b in data))
                STATE["replaced"] = True
                return "replace"
            return None
        if A.fault == "none" or i <= A.after or (i - A.after) % A.every != 0:
            return None
        if A.count and STATE["faults"] >= A.count:
            return None
        STATE["faults"] += 1
        return A.fault


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True   # headers and body are two writes: no 40 ms delayed-ACK stall

    def log_message(self, fmt, *args):
        pass

    def _log(self, status, n, fault):
        if A.log:
            with LOCK, open(A.log, "a") as f:
                m = re.fullmatch(r"bytes=(\d+)-\d*", (self.headers.get("Range") or "").strip())
                f.write("%s %d %d %s %s %.3f\n" % (self.path, status, n, fault or "-", m.group(1) if m else "-",
                                                 time.time()))

    # Each request is logged before its bytes are sent: the client may be done, and the test
    # stop this process, as soon as the last byte arrives (a load's last GET went unlogged).
    def _plain(self, status, fault, extra=()):
        body = b"injected %d\n" % status
        self._log(status, len(body), fault)
        self.send_response(status)
        for k, v in extra:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        fault = decide(self.headers)
        if fault in ("503", "507", "501", "429"):
            extra = [("Retry-After", "1")] if fault == "429" else []
            return self._plain(int(fault), fault, extra)
        if fault == "hdrdrip":
            self._log(206, 0, fault)
            self.wfile.write(b"HTTP/1.1 206 Partial Content\r\n")
            end = time.monotonic() + A.stall
            i = 0
            while time.monotonic() < end:
                self.wfile.write(b"X-Pad-%d: %s\r\n" % (i, b"y" * 1000))
                i += 1
                time.sleep(0.2)
            self.close_connection = True
            return None
        if fault == "hang":
            self._log(0, 0, fault)
            time.sleep(A.stall)
            self.close_connection = True
            return None
        self.undone = False
        status, body = self._forward("GET", fault)
        if self.undone:
            fault = None
        half = len(body) // 2
        if fault == "flip" and body:
            body = body[:half] + bytes([body[half] ^ 0x01]) + body[half + 1:]
        if fault == "bodydrip" and body:
            self._log(status, 0, fault)
            end = time.monotonic() + A.stall
            for i in range(len(body)):
                if time.monotonic() >= end:
                    break
                self.wfile.write(body[i:i + 1])
                self.wfile.flush()
                time.sleep(0.2)
            self.close_connection = True
            return None
        if fault == "slow" and body:
            self._log(status, 0, fault)
            for i in range(0, len(body), 4096):
                self.wfile.write(body[i:i + 4096])
                self.wfile.flush()
                time.sleep(4096 / A.rate)
            return None
        if fault == "stall" and body:
            n = half if A.stall_bytes < 0 else min(A.stall_bytes, len(body))
            self._log(status, n, fault)
            self.wfile.write(body[:n])
            self.wfile.flush()
            time.sleep(A.stall)
            self.wfile.write(body[n:])
            return None
        if fault in ("reset", "truncate") and half > 0:
            self._log(status, half, fault)
            self.wfile.write(body[:half])
            self.wfile.flush()
            if fault == "reset":
                self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.close_connection = True
            self.connection.close()
            return None
        self._log(status, len(body), fault)
        self.wfile.write(body + (b"GARBAGE!!\n" if fault == "crjunk" else b""))
        return None

    def do_HEAD(self):
        status, _ = self._forward("HEAD")
        self._log(status, 0, None)

    def _forward(self, method, fault=None):
        """The request sent on upstream; its status line and headers passed back here (a
        Content-Range fault rewrites them). Returns the status and the body, which the caller
        writes (or damages)."""
        up = http.client.HTTPConnection("127.0.0.1", A.upstream, timeout=60)
        hdrs = {k: v for k, v in self.headers.items()
                if k.lower() not in ("connection", "keep-alive", "proxy-connection")}
        # a client that takes this for its HTTP proxy (http_proxy) asks for absolute URLs: their
        # path goes upstream, whatever host they name
        path = self.path
        if path.lower().startswith("http://"):
            path = "/" + path.split("/", 3)[3] if path.count("/") >= 3 else "/"
        up.request(method, path, headers=hdrs)
        r = up.getresponse()
        body = r.read()
        up.close()
        headers = [(k, v) for k, v in r.getheaders()
                   if k.lower() not in ("connection", "keep-alive", "transfer-encoding", "date", "server")]
        if fault in ("crhalf", "crpast", "crshort", "crjunk") and r.status == 206:
            changed = content_range_fault(fault, headers, body)
            if changed is None:   # nothing to change: the fault goes to the next candidate
                with LOCK:
                    STATE["faults"] -= 1
                self.undone = True
            else:
                headers, body = changed
        self.send_response(r.status)
        for k, v in headers:
            self.send_header(k, v)
        self.end_headers()
        return r.status, body


def content_range_fault(fault, headers, body):
    """headers and body of a 206 with its Content-Range (and for crshort its body) changed;
    None where the change would change nothing (crpast of a range at the object's end)."""
    cr = next(v for k, v in headers if k.lower() == "content-range")
    a, b, t = map(int, re.fullmatch(r"bytes (\d+)-(\d+)/(\d+)", cr).groups())
    end = t - 1 if fault == "crpast" else a + (b - a) // 2
    if end == b:   # a range that ends at the object's end (crpast), or of one byte
        return None
    if fault in ("crshort", "crjunk"):
        body = body[:end - a + 1]
    out = []
    for k, v in headers:
        if k.lower() == "content-range":
            v = "bytes %d-%d/%d" % (a, end, t)
        elif k.lower() == "content-length":
            v = str(len(body))
        out.append((k, v))
    return out, body


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    # socketserver's backlog of 5 drops the SYNs of a loader's 16 connections made at once when the
    # accepting thread is slow (a loaded machine): a 1 s retransmit, a spurious connect timeout
    request_queue_size = 128

    def handle_error(self, request, client_address):
        pass   # the connections it resets on purpose


def main():
    global A
    p = argparse.ArgumentParser()
    p.add_argument("upstream", type=int)
    p.add_argument("portfile")
    p.add_argument("--fault", required=True,
                   choices=["reset", "truncate", "503", "507", "501", "429", "stall", "hang", "hdrdrip", "bodydrip", "slow", "crhalf", "crpast",
                            "crshort", "crjunk", "flip", "replace",
                            "none"])
    p.add_argument("--every", type=int, default=1)
    p.add_argument("--after", type=int, default=0)
    p.add_argument("--count", type=int, default=0)
    p.add_argument("--min-bytes", type=int, default=8192)
    p.add_argument("--stall", type=float, default=5.0)
    p.add_argument("--stall-bytes", type=int, default=-1)
    p.add_argument("--rate", type=float, default=65536.0)
    p.add_argument("--replace")
    p.add_argument("--replace-cmd")
    p.add_argument("--log")
    A = p.parse_args()
    if A.fault == "replace" and not (A.replace or A.replace_cmd):
        sys.exit("--fault replace needs --replace FILE or --replace-cmd CMD")
    srv = Server(("127.0.0.1", 0), Handler)
    with open(A.portfile + ".tmp", "w") as f:
        f.write(str(srv.server_address[1]))
    os.rename(A.portfile + ".tmp", A.portfile)
    srv.serve_forever()


if __name__ == "__main__":
    main()
