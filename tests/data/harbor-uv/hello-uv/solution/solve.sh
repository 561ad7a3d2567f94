#!/bin/bash
echo "Hello from uv!" > /app/greeting.txt
