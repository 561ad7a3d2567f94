#!/bin/bash
# Start the agent's service the way the instruction says, then probe it.
mkdir -p /logs/verifier
echo 0 > /logs/verifier/reward.txt
[ -f /app/start.sh ] || { echo "no /app/start.sh"; exit 0; }
timeout 20 bash /app/start.sh
if python3 /tests/probe.py; then
  echo 1 > /logs/verifier/reward.txt
fi
