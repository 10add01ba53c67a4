#!/usr/bin/env python3
"""http_range_server.py - a loopback HTTP/1.1 file server with what object stores give a loader:
single byte ranges (206 + Content-Range, 416 past the end), keep-alive, an ETag and Last-Modified
per file (from its inode, size and mtime in ns, so a replaced or rewritten file gets new ones),
If-Match (412 when it no longer matches) and 404s. Paths are percent-decoded. No directory listings.

Usage: http_range_server.py ROOT PORTFILE [--log FILE] [--deny SUBSTRING] [--no-if-match]
                           [--long-etag] [--weak-etag] [--no-validators] [--require-query Q]
                           [--content-encoding VALUE] [--redirect URL]
                           [--bucket-region REGION[,REGION...] [--region-answer 301|307|400|400-body|400-none|400-malformed]
                            [--region-head-only] [--no-head-bucket-region] [--head-bucket-status CODE]
                            [--head-bucket-stall SECONDS]]
                           [--tls CERT KEY --tls-log FILE]
Binds 127.0.0.1 on a free port and writes the port to PORTFILE once it accepts connections.
--log appends one line per GET: "<path> <status> <body bytes> <first byte asked for, or ->". --deny answers 403 (with an S3-like
<Code>AccessDenied</Code> body) to every path containing SUBSTRING. --no-if-match ignores If-Match, as
some servers do (the loader's ETag, Last-Modified and size checks must then catch a change).
--long-etag pads each ETag to 300 characters (longer than the loader keeps; If-Match still exact).
--weak-etag sends weak ETags (W/"..."), which If-Match compares strongly (RFC 9110 13.1.1): never
a match, a 412 for any If-Match. --no-validators sends neither ETag nor Last-Modified (a
change of the same size is then invisible). --require-query answers 403 to a request whose query string is
not Q (a SAS token's signature, say). --content-encoding gzip answers every range with its bytes
gzipped and Content-Encoding: gzip, asked for or not (a misconfigured proxy or CDN); another value
(aws-chunked, as some S3-compatible stores keep from an upload) is only sent as the header, beside
the raw bytes. --redirect answers every request with a 302 to URL.
--bucket-region answers like S3 does to a request for a bucket in another region (REGION) than
the one the request was signed for (the region of its SigV4 Authorization's credential scope; an
unsigned request names none, so is answered so too): 301 PermanentRedirect with an XML <Error>
naming the regional <Endpoint> and the header x-amz-bucket-region: REGION (a HEAD's 301 has the
header and no body); --region-answer 307 answers 307 TemporaryRedirect with the header, a Location
(this server's /trap/ path: a client that follows it shows in the log) and an <Endpoint>, as S3
answers on the global endpoint for a new bucket whose name has not reached every region yet; 400
answers 400 AuthorizationHeaderMalformed instead, its
body naming <Region>REGION</Region> and the header beside it; 400-body the same without the
header; 400-none answers 400 IllegalLocationConstraintException, which names no region (as S3 does
for regions opened since 2019); 400-malformed answers 400 AuthorizationHeaderMalformed naming no
region (a malformed credential scope, not a region). A request signed for REGION is served as usual. With several regions the bucket moves:
each wrong-region answer names the next one (a client that asks again in the region named is
told of another), the last staying. --region-head-only answers so to HEADs only (the GETs of a
load are served: a HEAD after the open meets the bucket elsewhere). With --bucket-region a HEAD of
the bucket (HeadBucket) is answered with x-amz-bucket-region naming it, at any status, as S3 does
(200 signed for its region, else 301, or 400 with 400-none); --no-head-bucket-region answers it 400
without the header (--head-bucket-status CODE: that status instead), and --head-bucket-stall SECONDS
waits that long before answering it.
--tls serves https with the PEM certificate (chain) CERT and its key KEY, the handshake on the
connection's own thread (a client that rejects the certificate stops no one else); --tls-log
appends "ok" or "failed <reason>" per handshake, so a test can count a client's attempts.
"""
import email.utils
import gzip
import http.server
import os
import re
import socketserver
import ssl
import sys
import threading
import time
import urllib.parse

ROOT = ""
LOG = None
DENY = None
IF_MATCH = True
TLS = None        # ssl.SSLContext with --tls
TLS_LOG = None
LOG_LOCK = threading.Lock()


LONG_ETAG = False
WEAK_ETAG = False
VALIDATORS = True
QUERY = None
ENCODING = None
REDIRECT = None
BUCKET_REGION = None   # the regions of --bucket-region; the first is the bucket's until it moves
REGION_ANSWER = "301"
REGION_HEAD_ONLY = False
NO_HEAD_BUCKET_REGION = False
HEAD_BUCKET_STATUS = 400
HEAD_BUCKET_STALL = 0.0


def etag_of(st):
    tag = "%x-%x-%x" % (st.st_ino, st.st_size, st.st_mtime_ns)
    return ('W/"%s"' if WEAK_ETAG else '"%s"') % (tag.ljust(298, "0") if LONG_ETAG else tag)


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True   # headers and body are two writes: no 40 ms delayed-ACK stall

    def log_message(self, fmt, *args):  # quiet: the tests read their own log
        pass

    def _log(self, status, n):
        if LOG:
            with LOG_LOCK, open(LOG, "a") as f:
                m = re.fullmatch(r"bytes=(\d+)-\d*", (self.headers.get("Range") or "").strip())
                f.write("%s %d %d %s\n" % (self.path, status, n, m.group(1) if m else "-"))

    # Logged before the body is sent: the client may be done, and the test read the log, as soon
    # as the last byte arrives (a loaded machine once left a load's last GET unlogged).
    def _send(self, status, body=b"", headers=()):
        self._log(status, len(body))
        self.send_response(status)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _signed_region(self):
        """The region of the SigV4 credential scope (Credential=KEY/DATE/REGION/s3/aws4_request)."""
        m = re.search(r"Credential=[^/,]*/[^/,]*/([^/,]*)/", self.headers.get("Authorization") or "")
        return m.group(1) if m else None

    def _wrong_region(self, rel):
        """S3's answer to a request sent to, or signed for, another region than the bucket's."""
        bucket, asked, rid = rel.split("/")[0], self._signed_region() or "none", "<RequestId>0</RequestId>"
        with LOG_LOCK:
            region = BUCKET_REGION[0]
            if len(BUCKET_REGION) > 1:
                del BUCKET_REGION[0]
        hdr = [("Content-Type", "application/xml")]
        if REGION_ANSWER == "400-none":
            body = ("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>IllegalLocationConstraintException"
                    "</Code><Message>The %s location constraint is incompatible for the region specific endpoint "
                    "this request was sent to.</Message>%s</Error>" % (region, rid))
            return self._send(400, body.encode(), hdr)
        if REGION_ANSWER == "400-malformed":
            body = ("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>AuthorizationHeaderMalformed</Code>"
                    "<Message>The authorization header is malformed; the Credential is mal-formed; expecting "
                    "\"&lt;YOUR-AKID&gt;/YYYYMMDD/REGION/SERVICE/aws4_request\".</Message>%s</Error>" % rid)
            return self._send(400, body.encode(), hdr)
        if REGION_ANSWER != "400-body":
            hdr.append(("x-amz-bucket-region", region))
        if REGION_ANSWER == "307":
            # a new bucket's name not yet known everywhere: S3's Location names the regional host;
            # here it is this server's /trap/ path, which no client may follow (the log shows it)
            host, port = self.server.server_address[:2]
            hdr.append(("Location", "http://%s:%d/trap/%s" % (host, port, rel)))
            body = ("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>TemporaryRedirect</Code>"
                    "<Message>Please re-send this request to the specified temporary endpoint. Continue to use "
                    "the original request endpoint for future requests.</Message><Endpoint>%s.s3.%s."
                    "amazonaws.com</Endpoint><Bucket>%s</Bucket>%s</Error>" % (bucket, region, bucket, rid))
            return self._send(307, body.encode(), hdr)
        if REGION_ANSWER == "301":
            body = ("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>PermanentRedirect</Code>"
                    "<Message>The bucket you are attempting to access must be addressed using the specified "
                    "endpoint. Please send all future requests to this endpoint.</Message><Endpoint>%s.s3.%s."
                    "amazonaws.com</Endpoint><Bucket>%s</Bucket>%s</Error>" % (bucket, region, bucket, rid))
            return self._send(301, body.encode(), hdr)
        body = ("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>AuthorizationHeaderMalformed</Code>"
                "<Message>The authorization header is malformed; the region '%s' is wrong; expecting '%s'"
                "</Message><Region>%s</Region>%s</Error>" % (asked, region, region, rid))
        return self._send(400, body.encode(), hdr)

    def _head_bucket(self):
        """HeadBucket: x-amz-bucket-region whatever the status (200 in the bucket's region, else a
        301, or a 400 for an opt-in region's bucket, without a body, as S3 answers a HEAD); none
        and 400 with --no-head-bucket-region."""
        region = BUCKET_REGION[0]
        if HEAD_BUCKET_STALL:
            time.sleep(HEAD_BUCKET_STALL)
        if NO_HEAD_BUCKET_REGION:
            return self._send(HEAD_BUCKET_STATUS)
        if self._signed_region() == region:
            return self._send(200, b"", [("x-amz-bucket-region", region)])
        return self._send(400 if REGION_ANSWER == "400-none" else 301, b"", [("x-amz-bucket-region", region)])

    def do_HEAD(self):
        self.do_GET()

    def do_GET(self):
        rel, _, query = self.path.partition("?")
        # the path percent-decoded, as web servers and object stores do ("model%201.safetensors"
        # is "model 1.safetensors"; "50%2541" is "50%41"); the query compared as sent
        rel = urllib.parse.unquote(rel.lstrip("/"), errors="surrogateescape")
        if REDIRECT:
            return self._send(302, b"", [("Location", REDIRECT)])
        if BUCKET_REGION and self.command == "HEAD" and "/" not in rel.rstrip("/"):
            return self._head_bucket()
        if BUCKET_REGION and self._signed_region() != BUCKET_REGION[0] and \
                (self.command == "HEAD" or not REGION_HEAD_ONLY):
            return self._wrong_region(rel)
        if QUERY is not None and query != QUERY:
            return self._send(403, b"<Error><Code>AuthenticationFailed</Code></Error>")
        if DENY and DENY in rel:
            return self._send(403, b"<Error><Code>AccessDenied</Code></Error>")
        path = os.path.realpath(os.path.join(ROOT, rel))
        if not path.startswith(os.path.realpath(ROOT) + os.sep) or not os.path.isfile(path):
            return self._send(404, b"not found\n")
        with open(path, "rb") as f:
            st = os.fstat(f.fileno())
            tag = etag_of(st)
            meta = [("ETag", tag), ("Last-Modified", email.utils.formatdate(st.st_mtime, usegmt=True))]
            meta = (meta if VALIDATORS else []) + [("Accept-Ranges", "bytes")]
            im = self.headers.get("If-Match")
            strong = [t.strip() for t in (im or "").split(",") if not WEAK_ETAG]
            if IF_MATCH and im and im.strip() != "*" and tag not in strong:
                return self._send(412, b"precondition failed\n", meta)
            size = st.st_size
            rng = self.headers.get("Range")
            if not rng:
                return self._send(200, f.read(), meta)
            m = re.fullmatch(r"bytes=(\d*)-(\d*)", rng.strip())
            if not m or (not m.group(1) and not m.group(2)):
                return self._send(400, b"bad range\n")
            if m.group(1):
                a = int(m.group(1))
                b = int(m.group(2)) if m.group(2) else size - 1
            else:
                a, b = max(0, size - int(m.group(2))), size - 1
            if a >= size or b < a:
                return self._send(416, b"", meta + [("Content-Range", "bytes */%d" % size)])
            b = min(b, size - 1)
            f.seek(a)
            body = f.read(b - a + 1)
            if ENCODING:
                body = gzip.compress(body) if ENCODING == "gzip" else body
                meta = meta + [("Content-Encoding", ENCODING)]
            self._send(206, body, meta + [("Content-Range", "bytes %d-%d/%d" % (a, b, size))])


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    # socketserver's backlog of 5 drops the SYNs of a loader's 16 connections made at once when the
    # accepting thread is slow (a loaded machine): a 1 s retransmit, a spurious connect timeout
    request_queue_size = 128

    def handle_error(self, request, client_address):
        pass   # a client that stopped reading (a load that failed on purpose) is no error here

    def finish_request(self, request, client_address):
        if TLS is None:
            return super().finish_request(request, client_address)
        try:
            request.settimeout(30)
            tls = TLS.wrap_socket(request, server_side=True)
        except (ssl.SSLError, OSError) as e:
            tls_log("failed %s" % (getattr(e, "reason", None) or type(e).__name__))
            return None
        tls_log("ok")
        return super().finish_request(tls, client_address)


def tls_log(line):
    if TLS_LOG:
        with LOG_LOCK, open(TLS_LOG, "a") as f:
            f.write(line + "\n")


def _flag(args, name):
    """Whether args holds the flag `name` (taken out of it)."""
    if name not in args:
        return False
    args.remove(name)
    return True


def _values(args, name, n=1):
    """The n values after `name` in args (taken out with it), or None."""
    if name not in args:
        return None
    i = args.index(name)
    vals = args[i + 1:i + 1 + n]
    del args[i:i + 1 + n]
    return vals


def main():
    global ROOT, LOG, DENY, IF_MATCH, TLS, TLS_LOG, LONG_ETAG, WEAK_ETAG, VALIDATORS, QUERY, ENCODING, REDIRECT
    global BUCKET_REGION, REGION_ANSWER, REGION_HEAD_ONLY, NO_HEAD_BUCKET_REGION, HEAD_BUCKET_STATUS, HEAD_BUCKET_STALL
    args = sys.argv[1:]
    tls = _values(args, "--tls", 2)
    if tls:
        TLS = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        TLS.load_cert_chain(*tls)
        TLS.set_alpn_protocols(["http/1.1"])
    TLS_LOG = (_values(args, "--tls-log") or [None])[0]
    IF_MATCH = not _flag(args, "--no-if-match")
    LONG_ETAG = _flag(args, "--long-etag")
    WEAK_ETAG = _flag(args, "--weak-etag")
    VALIDATORS = not _flag(args, "--no-validators")
    QUERY = (_values(args, "--require-query") or [None])[0]
    ENCODING = (_values(args, "--content-encoding") or [None])[0]
    REDIRECT = (_values(args, "--redirect") or [None])[0]
    regions = (_values(args, "--bucket-region") or [None])[0]
    BUCKET_REGION = regions.split(",") if regions else None
    REGION_ANSWER = (_values(args, "--region-answer") or ["301"])[0]
    REGION_HEAD_ONLY = _flag(args, "--region-head-only")
    NO_HEAD_BUCKET_REGION = _flag(args, "--no-head-bucket-region")
    HEAD_BUCKET_STATUS = int((_values(args, "--head-bucket-status") or ["400"])[0])
    HEAD_BUCKET_STALL = float((_values(args, "--head-bucket-stall") or ["0"])[0])
    DENY = (_values(args, "--deny") or [None])[0]
    LOG = (_values(args, "--log") or [None])[0]
    ROOT, portfile = args
    srv = Server(("127.0.0.1", 0), Handler)
    tmp = portfile + ".tmp"
    with open(tmp, "w") as f:
        f.write(str(srv.server_address[1]))
    os.rename(tmp, portfile)
    srv.serve_forever()


if __name__ == "__main__":
    main()
