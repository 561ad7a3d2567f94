import sys
import time
import urllib.request

deadline = time.time() + 5
while time.time() < deadline:
    try:
        body = urllib.request.urlopen("http://127.0.0.1:8000/index.html", timeout=2).read().decode()
    except OSError:
        time.sleep(0.2)
        continue
    print(body)
    sys.exit(0 if "status: ready" in body else 1)
print("nothing answered on port 8000")
sys.exit(1)
