"""Run a command on a busy machine: ``python .ci/busy.py N -- COMMAND...`` starts N processes
that each keep a core busy, runs COMMAND, then ends them, and exits with COMMAND's status.

``make test-stress`` runs the test suite this way: a test that counts what happened within some
wall-clock time (polls, overlaps, a batch finishing "in time") fails here first, as it would on
a loaded CI machine. The busy processes are this script's own children: ended however the
command ends, Ctrl-C included.
"""

from __future__ import annotations

import subprocess
import sys

SPIN = "while True:\n    pass\n"


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--" or not argv[0].isdigit():
        print(__doc__, file=sys.stderr)
        return 2
    spinners = [subprocess.Popen([sys.executable, "-c", SPIN]) for _ in range(int(argv[0]))]
    try:
        return subprocess.call(argv[2:])
    finally:
        for spinner in spinners:
            spinner.kill()
        for spinner in spinners:
            spinner.wait()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
