"""A real Ctrl-C (or a scheduler's SIGTERM) for the Python tests: a
python3 process that prints its run's log is sent the signal once a given
line comes, and must then end on its own (exit 0) with a line beginning
"INTERRUPTED" (the KeyboardInterrupt it caught; another word when asked).
Used by test_syncfac.py (train) and test_cluster.py (launch, node).
"""

import os
import signal
import subprocess

import pytest


def interrupted(args, when, timeout, sig=signal.SIGINT, word="INTERRUPTED",
                env=None):
    """Runs `args` (with `env` added to the environment), sends `sig` at
    the first stdout line that starts with (or, as "*text", contains)
    `when`, waits at most `timeout` s for the end; (the line beginning
    `word`, stdout, stderr)."""
    proc = subprocess.Popen(args, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, **(env or {})))
    anywhere = when.startswith("*")
    text = when[1:] if anywhere else when
    try:
        for line in proc.stdout:
            if (text in line) if anywhere else line.startswith(text):
                proc.send_signal(sig)
                break
        else:
            pytest.fail("no line %r came: %s" % (text, proc.stderr.read()))
        out, err = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    words = [l for l in out.splitlines() if l.startswith(word)]
    assert words, out + err
    return words[0], out, err
