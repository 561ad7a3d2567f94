import subprocess


def run(*args, **kw):
    return subprocess.run(args, capture_output=True, text=True, timeout=60, **kw)


def test_builds_from_clean():
    r = run("make", "-C", "/app", "clean", "all")
    assert r.returncode == 0, r.stdout + r.stderr


def test_counts_lines(tmp_path):
    run("make", "-C", "/app", "all")
    for text in ["", "one\n", "a b c\nd e\n\nlast\n", "x\n" * 1000]:
        f = tmp_path / "in.txt"
        f.write_text(text)
        r = run("/app/bin/wc-lines", str(f))
        assert r.returncode == 0 and r.stdout == f"{text.count(chr(10))}\n", (text[:20], r.stdout)
