#!/bin/bash
set -e
mkdir -p /app/site
echo '<html><body>status: ready</body></html>' > /app/site/index.html
cat > /app/start.sh <<'SH'
#!/bin/bash
nohup python3 -m http.server 8000 --bind 127.0.0.1 --directory /app/site >/dev/null 2>&1 &
SH
chmod +x /app/start.sh
