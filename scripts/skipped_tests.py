#!/usr/bin/env python3
"""What did not run, at the end of scripts/test.sh: reads CTest's JUnit
report and prints one block with every skipped entry and its reason.

A suite may skip only for hardware this machine lacks (a GPU, a CPU
instruction-set level): tests/hardware_skip.hpp prints the line this reads
("syncfac-skip (GPU): ..." or "syncfac-skip (CPU level): ..."). An entry
skipped without that line, or not run at all, fails the run (exit 1): a
skip for anything else hides what was not tested.

  skipped_tests.py JUNIT_XML
"""
import re
import sys
import xml.etree.ElementTree as ET

MARKER = re.compile(r"^syncfac-skip \((GPU|CPU level)\): (.*)$", re.M)
# Boost.Test colours its log; CTest writes the escape character into its
# XML report as "[NON-XML-CHAR-0x1B]". A colour code may stand before the
# marker on its line (a global fixture's skip follows Boost's own lines).
COLOUR = re.compile(r"(\x1b|\[NON-XML-CHAR-0x1B\])\[[0-9;]*m")


def main(argv):
    if len(argv) != 2:
        print("usage: skipped_tests.py JUNIT_XML", file=sys.stderr)
        return 2
    try:
        suite = ET.parse(argv[1]).getroot()
    except (OSError, ET.ParseError) as e:
        print(f"syncfac: cannot read CTest's report {argv[1]}: {e}",
              file=sys.stderr)
        return 1
    cases = suite.findall("testcase")
    hardware, other = [], []
    for case in cases:
        status = case.get("status")
        if status in ("run", "fail"):
            continue
        name = case.get("name")
        out = COLOUR.sub("", case.findtext("system-out") or "")
        found = MARKER.search(out)
        if status == "notrun" and found:
            hardware.append((name, f"{found.group(1)}: {found.group(2)}"))
        else:
            skipped = case.find("skipped")
            why = skipped.get("message") if skipped is not None else status
            last = [l for l in out.splitlines() if l.strip()][-3:]
            other.append((name, f"{why}; its last lines: "
                                + (" | ".join(last) or "(none)")))
    print(f"syncfac: {len(cases) - len(hardware) - len(other)} of "
          f"{len(cases)} entries ran; skipped for hardware this machine "
          f"lacks: {len(hardware)}")
    for name, why in hardware:
        print(f"  skipped  {name}: {why}")
    for name, why in other:
        print(f"  NOT RUN  {name}: {why}")
    if other:
        print(f"syncfac: {len(other)} entries did not run for a reason "
              "other than missing hardware: the run fails")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
