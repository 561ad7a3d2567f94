#!/bin/bash
cat > /app/wordfreq.py <<'PY'
import re
import sys
from collections import Counter

text = open(sys.argv[1]).read()
counts = Counter(w.lower() for w in re.findall(r"[A-Za-z]+", text))
for word, count in sorted(counts.items(), key=lambda wc: (-wc[1], wc[0]))[: int(sys.argv[2])]:
    print(word, count)
PY
