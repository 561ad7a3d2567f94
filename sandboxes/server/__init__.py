"""The process that lives inside every sandbox and runs commands for the harness.

Runs on the sandbox's own Python (stdlib only: the container image and the bwrap view of
the host carry nothing else), started as `python3 -E -s -m server.main` from the directory
that holds this package, bind-mounted read-only. The harness imports `wire` from here too,
so both ends share one definition of the frames and of the handshake.
"""
