"""A real Ctrl-C (or a scheduler's SIGTERM) for the Python tests: a
python3 process that prints its run's log is sent the signal once a given
line comes, and must then end on its own (exit 0) with a line beginning
"INTERRUPTED" (the KeyboardInterrupt it caught; another word when asked).
Used by test_syncfac.py (train) and test_cluster.py (launch, node).
"""

import os
import signal
import subprocess
import threading

import pytest


def interrupted(args, when, timeout, sig=signal.SIGINT, word="INTERRUPTED",
                env=None):
    """Runs `args` (with `env` added to the environment), sends `sig` at
    the first stdout line that starts with (or, as "*text", contains)
    `when`, and waits for the end; `timeout` s bound each wait, the line's
    and the end's. Returns (the line beginning `word`, stdout, stderr)."""
    proc = subprocess.Popen(args, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, **(env or {})))
    anywhere = when.startswith("*")
    text = when[1:] if anywhere else when
    # Reading lines has no timeout of its own: past `timeout` the process
    # is killed, which ends the reading.
    watchdog = threading.Timer(timeout, proc.kill)
    watchdog.start()
    try:
        seen = []
        for line in proc.stdout:
            seen.append(line)
            if (text in line) if anywhere else line.startswith(text):
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
