#!/bin/bash
set -e
sed -i '/^\[server\]/,/^\[/ { s/^port = .*/port = 9090/; s/^debug = .*/debug = false/ }' /app/service.ini
