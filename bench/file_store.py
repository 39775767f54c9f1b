"""A read-only S3 endpoint over a local folder, for the benchmark's large objects.

moto (the S3 server of the other object-store workload and of the tests) keeps an object in one
buffer and copies all of it for every request, a ranged one included: reading the footer of a
2 GB object would move 4 GB. Time to first row and memory on large objects would then measure
moto. This server answers the requests every engine's S3 client makes to read (ListObjectsV2,
HEAD, GET with a byte range, GetBucketLocation) from files under ``--root``: a bucket is a
folder there, a key a file below it (symbolic links followed, so one generated file can be
served under many keys), a range goes out with ``os.sendfile`` from the file itself. Requests
are not authenticated (any signature is accepted) and nothing can be written.

    python bench/file_store.py --root DIR --port PORT
"""

from __future__ import annotations

import argparse
import email.utils
import hashlib
import os
import re
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit
from xml.sax.saxutils import escape

XMLNS = "http://s3.amazonaws.com/doc/2006-03-01/"
RANGE = re.compile(r"bytes=(\d*)-(\d*)$")
PAGE = 1_000  # keys per listing page, as S3's own default and maximum


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: clients reuse their connections
    root: Path

    def log_message(self, format: str, *args: object) -> None:
        pass

    def _target(self) -> tuple[str, str, dict[str, list[str]]]:
        parts = urlsplit(self.path)
        bucket, _, key = unquote(parts.path).lstrip("/").partition("/")
        return bucket, key, parse_qs(parts.query, keep_blank_values=True)

    def _send(self, status: int, body: bytes, content_type: str = "application/xml") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _error(self, status: int, code: str, resource: str) -> None:
        body = (
            f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{code}</Code>'
            f"<Resource>{escape(resource)}</Resource></Error>"
        )
        self._send(status, body.encode())

    def _file(self, bucket: str, key: str) -> Path | None:
        path = (self.root / bucket / key).resolve()
        return path if key and path.is_file() else None

    def do_HEAD(self) -> None:
        self.do_GET()

    def do_GET(self) -> None:
        bucket, key, query = self._target()
        if not (self.root / bucket).is_dir():
            return self._error(404, "NoSuchBucket", bucket)
        if not key:
            if "location" in query:
                body = f'<?xml version="1.0"?><LocationConstraint xmlns="{XMLNS}"/>'
                return self._send(200, body.encode())
            if self.command == "HEAD":
                return self._send(200, b"")
            return self._list(bucket, query)
        path = self._file(bucket, key)
        if path is None:
            return self._error(404, "NoSuchKey", key)
        return self._object(path)

    def _object(self, path: Path) -> None:
        stat = path.stat()
        size, start, end = stat.st_size, 0, stat.st_size - 1
        wanted = self.headers.get("Range")
        match = RANGE.match(wanted.strip()) if wanted else None
        if match and (match[1] or match[2]):
            if match[1]:
                start = int(match[1])
                end = min(int(match[2]), size - 1) if match[2] else size - 1
            else:  # the last n bytes
                start = max(size - int(match[2]), 0)
            if start >= size or start > end:
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{size}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
        self.send_response(206 if match else 200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(end - start + 1))
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("ETag", _etag(stat))
        self.send_header("Last-Modified", email.utils.formatdate(stat.st_mtime, usegmt=True))
        if match:
            self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
        self.end_headers()
        if self.command == "HEAD":
            return
        self.wfile.flush()
        with open(path, "rb") as source:
            offset, left = start, end - start + 1
            while left > 0:
                sent = os.sendfile(self.connection.fileno(), source.fileno(), offset, left)
                if sent == 0:
                    break
                offset, left = offset + sent, left - sent

    def _list(self, bucket: str, query: dict[str, list[str]]) -> None:
        prefix = query.get("prefix", [""])[0]
        delimiter = query.get("delimiter", [""])[0]
        after = query.get("continuation-token", query.get("start-after", [""]))[0]
        limit = min(int(query.get("max-keys", [PAGE])[0]), PAGE)
        base = self.root / bucket
        keys = sorted(
            path.relative_to(base).as_posix()
            for path in _walk(base)
            if path.relative_to(base).as_posix().startswith(prefix)
        )
        contents, prefixes = [], []
        for key in keys:
            if after and key <= after:
                continue
            if delimiter and delimiter in key[len(prefix) :]:
                common = key[: len(prefix) + key[len(prefix) :].index(delimiter) + 1]
                if common not in prefixes:
                    prefixes.append(common)
                continue
            contents.append(key)
            if len(contents) + len(prefixes) >= limit:
                break
        last = (contents or prefixes or [""])[-1]
        truncated = len(contents) + len(prefixes) >= limit and any(key > last for key in keys)
        items = []
        for key in contents:
            stat = (base / key).stat()
            modified = email.utils.formatdate(stat.st_mtime, usegmt=True)
            iso = email.utils.parsedate_to_datetime(modified).strftime("%Y-%m-%dT%H:%M:%S.000Z")
            items.append(
                f"<Contents><Key>{escape(key)}</Key><LastModified>{iso}</LastModified>"
                f"<ETag>{escape(_etag(stat))}</ETag><Size>{stat.st_size}</Size>"
                "<StorageClass>STANDARD</StorageClass></Contents>"
            )
        items += [
            f"<CommonPrefixes><Prefix>{escape(common)}</Prefix></CommonPrefixes>"
            for common in prefixes
        ]
        token = f"<NextContinuationToken>{escape(last)}</NextContinuationToken>"
        body = (
            f'<?xml version="1.0" encoding="UTF-8"?><ListBucketResult xmlns="{XMLNS}">'
            f"<Name>{escape(bucket)}</Name><Prefix>{escape(prefix)}</Prefix>"
            f"<KeyCount>{len(contents) + len(prefixes)}</KeyCount><MaxKeys>{limit}</MaxKeys>"
            f"<Delimiter>{escape(delimiter)}</Delimiter>"
            f"<IsTruncated>{'true' if truncated else 'false'}</IsTruncated>"
            f"{token if truncated else ''}{''.join(items)}</ListBucketResult>"
        )
        self._send(200, body.encode())


def _walk(base: Path) -> list[Path]:
    found = []
    for folder, _, names in os.walk(base, followlinks=True):
        found += [Path(folder) / name for name in names]
    return found


def _etag(stat: os.stat_result) -> str:
    digest = hashlib.md5(f"{stat.st_ino}:{stat.st_size}:{stat.st_mtime_ns}".encode())
    return f'"{digest.hexdigest()}"'


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, required=True)
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    Handler.root = args.root.resolve()
    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    server.daemon_threads = True
    server.serve_forever()


if __name__ == "__main__":
    main()
