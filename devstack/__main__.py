"""``python -m devstack demo`` / ``python -m devstack test [pytest args...]`` (see the Makefile)."""

from __future__ import annotations

import sys

USAGE = """usage: python -m devstack demo
       python -m devstack test [pytest args...]
       python -m devstack run -- COMMAND [ARGS...]

demo  run the portal with the simulated cluster, embedded PostgreSQL and Redis,
      a Celery worker and beat, until Ctrl-C
test  run makemigrations --check and pytest (default: tests/) against embedded services
run   run any command (e.g. a benchmark) with its own embedded PostgreSQL and Redis
"""


def main(argv: list[str]) -> int:
    """Dispatch to the demo or the test flow (imported lazily: each pulls in different things)."""
    if not argv or argv[0] in {"-h", "--help", "help"}:
        print(USAGE, end="")
        return 0 if argv else 2
    command, rest = argv[0], argv[1:]
    if command == "demo" and not rest:
        from .demo import run_demo

        return run_demo()
    if command == "test":
        from .testrun import run_tests

        return run_tests(rest)
    if command == "run":
        from .testrun import run_command

        return run_command(rest[1:] if rest[:1] == ["--"] else rest)
    print(USAGE, end="", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
