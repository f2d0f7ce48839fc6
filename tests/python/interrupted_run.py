"""A real Ctrl-C (or a scheduler's SIGTERM) for the Python tests: a
python3 process that prints its run's log is sent the signal once a given
line comes, and must then end on its own (exit 0) with a line beginning
"INTERRUPTED" (the KeyboardInterrupt it caught; another word when asked).
Used by test_syncfac.py (train) and test_cluster.py (launch, node).
"""

import os
import re
import signal
import subprocess
import threading

import pytest


def logged_step(at_least, prefix=""):
    """A pattern for interrupted()'s `when`: a log line of global step
    `at_least` (< 10) or later, after `prefix` ("[chief:0] "). A line is
    logged only for a window with a worker's report, so the line of one
    given step may never come (docs/observability.md)."""
    return re.compile(re.escape(prefix) + r"global_step: ([%d-9]|[1-9]\d+) "
                      % at_least)


def interrupted(args, when, timeout, sig=signal.SIGINT, word="INTERRUPTED",
                env=None):
    """Runs `args` (with `env` added to the environment), sends `sig` at
    the first stdout line that starts with (or, as "*text", contains)
    `when`, or that the compiled pattern `when` finds, and waits for the
    end; `timeout` s bound each wait, the line's and the end's. Returns
    (the line beginning `word`, stdout, stderr)."""
    proc = subprocess.Popen(args, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, **(env or {})))
    if hasattr(when, "search"):
        found = when.search
        text = when.pattern
    elif when.startswith("*"):
        text = when[1:]
        found = lambda line: text in line
    else:
        text = when
        found = lambda line: line.startswith(text)
    # Reading lines has no timeout of its own: past `timeout` the process
    # is killed, which ends the reading.
    watchdog = threading.Timer(timeout, proc.kill)
    watchdog.start()
    try:
        seen = []
        for line in proc.stdout:
            seen.append(line)
            if found(line):
                watchdog.cancel()
                proc.send_signal(sig)
                break
        else:
            watchdog.cancel()
            pytest.fail("waited %s s for a line %r; the process %s: %s%s"
                        % (timeout, text,
                           "was killed" if proc.poll() == -9 else "ended",
                           "".join(seen[-20:]), proc.stderr.read()))
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            pytest.fail("waited %s s for the process to end after %s"
                        % (timeout, signal.Signals(sig).name))
    finally:
        watchdog.cancel()
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    words = [l for l in out.splitlines() if l.startswith(word)]
    assert words, out + err
    return words[0], out, err
