#!/bin/bash
set -e
cd /app/repo
git checkout -q -b docs main
git add NOTES.md
git -c user.name=agent -c user.email=agent@example.com commit -q -m "Add release notes"
