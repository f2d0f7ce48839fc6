#!/usr/bin/env python3
"""scripts/skipped_tests.py, the closing block of scripts/test.sh, on JUnit
reports as CTest 3.25 writes them: a hardware skip is listed with its
reason, also when Boost's colour codes (written by CTest as
"[NON-XML-CHAR-0x1B]") stand before the marker, as after a global
fixture's skip; a skip without the marker, or an entry not run, fails.

  skip_report.py SOURCE_DIR
"""
import os
import subprocess
import sys
import tempfile

CASE = ('<testcase name="%s" classname="%s" time="0.1" status="%s">%s'
        '<system-out>%s</system-out></testcase>')
# What CTest writes for an entry that exited with its skip code.
SKIPPED = '<skipped message="SKIP_RETURN_CODE=77"/>'


def report(cases):
    body = "".join(CASE % (n, n, s, SKIPPED if s == "notrun" else "", o)
                   for n, s, o in cases)
    return ('<?xml version="1.0" encoding="UTF-8"?><testsuite name="x" '
            'tests="%d">%s</testsuite>' % (len(cases), body))


def run(script, cases):
    with tempfile.NamedTemporaryFile("w", suffix=".xml", delete=False) as f:
        f.write(report(cases))
    try:
        r = subprocess.run([sys.executable, script, f.name],
                           stdout=subprocess.PIPE, universal_newlines=True)
    finally:
        os.unlink(f.name)
    print(r.stdout, end="")
    return r.returncode, r.stdout


def main():
    script = os.path.join(sys.argv[1], "scripts", "skipped_tests.py")
    fails = []
    fixture_skip = ("Running 13 test cases...\n[NON-XML-CHAR-0x1B][1;34;49m"
                    "Entering test module \"k\"\n[NON-XML-CHAR-0x1B][0;39;49m"
                    "syncfac-skip (CPU level): SYNCFAC_TEST_ISA=avx512: "
                    "unavailable\n")
    code, out = run(script, [
        ("ran", "run", "ok\n"),
        ("gpu", "notrun", "syncfac-skip (GPU): no CUDA device\n"),
        ("level", "notrun", fixture_skip)])
    if code != 0 or "skipped  level: CPU level: SYNCFAC_TEST_ISA=avx512" \
            not in out or "skipped  gpu: GPU: no CUDA device" not in out:
        fails.append("hardware skips (one after colour codes) not accepted")
    code, out = run(script, [
        ("ran", "run", "ok\n"),
        ("tool", "notrun", "skipped: no promtool\n")])
    if code != 1 or "NOT RUN  tool" not in out:
        fails.append("a skip without the marker did not fail the run")
    for f in fails:
        print("FAIL: " + f)
    sys.exit(1 if fails else 0)


if __name__ == "__main__":
    main()
