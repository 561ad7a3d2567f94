"""Run every benchmark (`bench/bench_*.py`) and collect their tables in bench/results/.

    python bench/run.py [--quick] [--only sandboxes,kernels]

Each benchmark reports ratios against a baseline measured in the same run, because this
machine is shared and noisy; absolute numbers are for orientation only.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small shapes / few episodes (a smoke run)")
    ap.add_argument("--only", default="", help="comma-separated names, e.g. sandboxes,kernels")
    args = ap.parse_args()
    wanted = {w.strip() for w in args.only.split(",") if w.strip()}
    scripts = sorted(
        p for p in HERE.glob("bench_*.py") if not wanted or p.stem.removeprefix("bench_") in wanted
    )
    failed = []
    for script in scripts:
        name = script.stem.removeprefix("bench_")
        print(f"\n## {name}\n", flush=True)
        start = time.time()
        res = subprocess.run([sys.executable, str(script), *(["--quick"] if args.quick else [])])
        print(f"({name}: {time.time() - start:.0f}s, exit {res.returncode})", flush=True)
        if res.returncode:
            failed.append(name)
    print(f"\nresults in {HERE / 'results'}" + (f"; FAILED: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
