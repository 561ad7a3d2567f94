import json
import os
import re
import subprocess
import sys
from collections import Counter

import tabulate  # installed by the Dockerfile's pip step: fails here if that step did not run

TEXTS = [
    "b a b c a b",
    "Apple apple APPLE pear. Pear! kiwi",
    "one two three four five six seven eight nine ten",
    "zz yy zz yy xx",
]


def expected(text, n):
    counts = Counter(w.lower() for w in re.findall(r"[A-Za-z]+", text))
    return "".join(f"{w} {c}\n" for w, c in sorted(counts.items(), key=lambda wc: (-wc[1], wc[0]))[:n])


def main():
    n = int(os.environ["WORD_FREQ_TOP"])
    passed = 0
    rows = []
    for i, text in enumerate(TEXTS):
        path = f"/tmp/wordfreq-case-{i}.txt"
        with open(path, "w") as f:
            f.write(text)
        try:
            # the agent's script runs as the sandbox's unprivileged user, never as root
            r = subprocess.run(
                [
                    "setpriv",
                    "--reuid=agent",
                    "--regid=agent",
                    "--init-groups",
                    "python",
                    "/app/wordfreq.py",
                    path,
                    str(n),
                ],
                capture_output=True,
                text=True,
                timeout=20,
            )
            ok = r.returncode == 0 and r.stdout == expected(text, n)
        except (OSError, subprocess.TimeoutExpired):
            ok = False
        passed += ok
        rows.append([i, "ok" if ok else "wrong"])
    print(tabulate.tabulate(rows, headers=["case", "result"]), file=sys.stderr)
    print(json.dumps({"reward": passed / len(TEXTS), "cases_passed": passed}))


main()
