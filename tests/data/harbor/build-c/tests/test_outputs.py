import os
import subprocess
import tempfile

# The agent's build and program run as the sandbox's unprivileged user (as the agent worked),
# never as root: nothing of theirs can write the reward.
AS_AGENT = ["setpriv", "--reuid=agent", "--regid=agent", "--init-groups"]


def run(*args):
    return subprocess.run([*AS_AGENT, *args], capture_output=True, text=True, timeout=60)


def test_builds_from_clean():
    r = run("make", "-C", "/app", "clean", "all")
    assert r.returncode == 0, r.stdout + r.stderr


def test_counts_lines():
    run("make", "-C", "/app", "all")
    folder = tempfile.mkdtemp()
    os.chmod(folder, 0o755)
    for text in ["", "one\n", "a b c\nd e\n\nlast\n", "x\n" * 1000]:
        path = os.path.join(folder, "in.txt")
        with open(path, "w") as f:
            f.write(text)
        os.chmod(path, 0o644)
        r = run("/app/bin/wc-lines", path)
        assert r.returncode == 0 and r.stdout == f"{text.count(chr(10))}\n", (text[:20], r.stdout)
