#!/bin/bash
# The reward is the share of cases the script gets right, written as Harbor's reward.json.
mkdir -p /logs/verifier
python3 /tests/check.py > /logs/verifier/reward.json
