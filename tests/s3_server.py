"""An S3-compatible server on 127.0.0.1 for the tests (moto's ``ThreadedMotoServer``, a real HTTP
server), with the standard variables every S3 client reads pointed at it while it runs."""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator

ENV = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL", "AWS_DEFAULT_REGION")


@contextlib.contextmanager
def local_s3() -> Iterator[str]:
    """The server's URL, with test credentials and ``AWS_ENDPOINT_URL`` set; all as they were
    once it stops."""
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    url = f"http://{host}:{port}"
    saved = {k: os.environ.get(k) for k in ENV}
    os.environ.update(
        AWS_ACCESS_KEY_ID="testing",
        AWS_SECRET_ACCESS_KEY="testing-secret-value",
        AWS_ENDPOINT_URL=url,
        AWS_DEFAULT_REGION="us-east-1",
    )
    try:
        yield url
    finally:
        server.stop()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
