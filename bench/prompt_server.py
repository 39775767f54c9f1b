"""The prompt workload's server: vane.testing's OpenAIServer (which also reads message
content given as a list of parts, as Daft's prompt sends it), plus what the benchmark needs.
Run from the repository root: ``python bench/prompt_server.py --port P --latency 0.05``.

``GET /bench/stats`` returns the requests answered and the most ever in flight since the last
call, then starts counting anew: the driver records both after each run, so the table shows
that each engine really kept the same number of requests in flight.
"""

from __future__ import annotations

import argparse
import sys
import threading
from pathlib import Path

from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository root

from vane.testing.server import Behaviour, OpenAIServer


class BenchServer(OpenAIServer):
    async def stats(self, request: web.Request) -> web.Response:
        with self._lock:
            body = {"requests": self.requests, "max_in_flight": self.max_in_flight}
            self.requests = 0
            self.max_in_flight = self.in_flight
            self.arrivals.clear()
            self.by_prompt.clear()
        return web.json_response(body)

    def _app(self) -> web.Application:
        app = super()._app()
        app.router.add_get("/bench/stats", self.stats)
        return app


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--latency", type=float, required=True)
    args = parser.parse_args()
    server = BenchServer(Behaviour(latency=args.latency), port=args.port).start()
    print(f"serving {server.base_url}", flush=True)
    threading.Event().wait()


if __name__ == "__main__":
    main()
