#!/bin/bash
# Start the agent's service as the instruction says, as the unprivileged user the agent worked
# as (so nothing of the agent's runs as root here and none of it can write the reward), probe
# it, and write the reward last.
mkdir -p /logs/verifier
reward=0
if [ -f /app/start.sh ]; then
  timeout 20 setpriv --reuid=agent --regid=agent --init-groups bash /app/start.sh
  python3 /tests/probe.py && reward=1
else
  echo "no /app/start.sh"
fi
echo "$reward" > /logs/verifier/reward.txt
