#!/usr/bin/env python3
"""ckpt benchmark: times ckpt against git baselines on the same tree in the same run.

Fixtures come from ../shared/bench/gen-repo.sh and dirty.sh so every figure is comparable.
Reports medians and ratios against `git status --porcelain` for:
  - no-op snapshot (nothing changed since the last checkpoint)
  - snapshot after `dirty.sh 100`
  - first snapshot in a fresh clone
  - restore of the checkpoint taken before `dirty.sh 100` (guard + plan + writes + verify)
  - peak RSS of the snapshot process
  - the watch daemon: start-up, a watched no-op snapshot, the daemon's RSS
Baselines in the same run: `git status --porcelain`, `git stash create`, and a temporary-index
`git add -A && git write-tree`.

usage: bench/bench.py [--quick | --files N] [--runs R] [--ckpt PATH] [--keep DIR]
"""
import argparse, json, os, resource, shutil, statistics, subprocess, sys, tempfile, time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def find_shared_bench():
    for cand in [os.path.join(ROOT, "..", "shared", "bench"), os.path.join(ROOT, "shared", "bench")]:
        if os.path.isfile(os.path.join(cand, "gen-repo.sh")):
            return os.path.abspath(cand)
    sys.exit("cannot find shared/bench/gen-repo.sh next to the repository")


def run(cmd, cwd, env=None, check=True):
    """Runs cmd, returns (seconds, peak RSS of the child in KiB)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    elapsed = time.perf_counter() - start
    if check and proc.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed in {cwd}: {proc.stderr.decode(errors='replace')}")
    rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return elapsed, max(rss, before)


def peak_rss_kib(cmd, cwd):
    """Peak RSS of one run of cmd, via /usr/bin/time if present, else None."""
    if not os.path.exists("/usr/bin/time"):
        return None
    proc = subprocess.run(["/usr/bin/time", "-f", "%M"] + cmd, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        return int(proc.stderr.decode().strip().splitlines()[-1])
    except (ValueError, IndexError):
        return None


def median_of(fn, runs):
    samples = [fn() for _ in range(runs)]
    return statistics.median(samples)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="10k files, 3 runs (CI-sized)")
    ap.add_argument("--files", type=int, default=70000)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--ckpt", default=os.path.join(ROOT, "target", "release", "ckpt"))
    ap.add_argument("--keep", help="reuse/keep fixtures in this directory")
    args = ap.parse_args()
    if args.quick:
        args.files, args.runs = 10000, 3
    ckpt = os.path.abspath(args.ckpt)
    if not os.path.exists(ckpt):
        sys.exit(f"{ckpt} not found: build it first (cargo build --release) or pass --ckpt")
    shared = find_shared_bench()
    work = args.keep or tempfile.mkdtemp(prefix="ckpt-bench-")
    os.makedirs(work, exist_ok=True)
    origin = os.path.join(work, f"origin-{args.files}")
    if not os.path.exists(origin):
        subprocess.run(["bash", os.path.join(shared, "gen-repo.sh"), origin, str(args.files)], check=True, stdout=subprocess.DEVNULL)

    results = {}

    def fresh_clone(name):
        dest = os.path.join(work, name)
        shutil.rmtree(dest, ignore_errors=True)
        subprocess.run(["git", "clone", "-q", origin, dest], check=True)
        subprocess.run(["git", "config", "gc.auto", "0"], cwd=dest, check=True)
        time.sleep(1.1)  # let the index stop being racily clean, like gen-repo.sh does
        subprocess.run(["git", "update-index", "--refresh", "-q"], cwd=dest, stdout=subprocess.DEVNULL)
        subprocess.run(["git", "status", "--porcelain"], cwd=dest, stdout=subprocess.DEVNULL)
        return dest

    def git_status(repo):
        return run(["git", "status", "--porcelain"], repo)[0]

    def stash_create(repo):
        return run(["git", "stash", "create"], repo)[0]

    def temp_index_write_tree(repo):
        idx = os.path.join(tempfile.gettempdir(), f"ckpt-bench-index-{os.getpid()}")
        shutil.copyfile(os.path.join(repo, ".git", "index"), idx)
        env = dict(os.environ, GIT_INDEX_FILE=idx)
        start = time.perf_counter()
        subprocess.run(["git", "add", "-A"], cwd=repo, env=env, check=True)
        subprocess.run(["git", "write-tree"], cwd=repo, env=env, check=True, stdout=subprocess.DEVNULL)
        elapsed = time.perf_counter() - start
        os.unlink(idx)
        return elapsed

    def ckpt_snapshot(repo):
        return run([ckpt, "snapshot"], repo)[0]

    # First snapshot in a fresh clone (each sample on its own clone).
    firsts = []
    for i in range(args.runs):
        repo = fresh_clone(f"first-{i}")
        firsts.append(ckpt_snapshot(repo))
        shutil.rmtree(repo)
    repo = fresh_clone("main")
    results["git status --porcelain (clean)"] = median_of(lambda: git_status(repo), args.runs)
    results["ckpt snapshot: first in a fresh clone"] = statistics.median(firsts)
    ckpt_snapshot(repo)
    results["ckpt snapshot: no-op"] = median_of(lambda: ckpt_snapshot(repo), args.runs)
    rss_noop = peak_rss_kib([ckpt, "snapshot"], repo)

    # The watch daemon: its start-up (watches on every directory), then a watched no-op.
    start = time.perf_counter()
    subprocess.run([ckpt, "watch", "start"], cwd=repo, check=True, stdout=subprocess.DEVNULL)
    results["ckpt watch start (daemon up, every directory watched)"] = time.perf_counter() - start
    for _ in range(2):  # the first watched snapshot gets a token, the second a base
        run([ckpt, "snapshot", "--watch"], repo)
    results["ckpt snapshot --watch: no-op"] = median_of(lambda: run([ckpt, "snapshot", "--watch"], repo)[0], args.runs)
    status = subprocess.run([ckpt, "--json", "watch", "status"], cwd=repo, capture_output=True, text=True).stdout
    pid = json.loads(status.strip().splitlines()[-1]).get("pid")
    rss_daemon = None
    if pid:
        with open(f"/proc/{pid}/status") as f:
            rss_daemon = next((int(l.split()[1]) for l in f if l.startswith("VmRSS:")), None)
    subprocess.run([ckpt, "watch", "stop"], cwd=repo, stdout=subprocess.DEVNULL)
    results["ckpt status"] = median_of(lambda: run([ckpt, "status"], repo)[0], args.runs)

    base = subprocess.run([ckpt, "--json", "list"], cwd=repo, capture_output=True, text=True, check=True).stdout.strip().splitlines()[-1]
    base_id = json.loads(base)["id"]
    subprocess.run(["bash", os.path.join(shared, "dirty.sh"), repo, "100"], check=True, stdout=subprocess.DEVNULL)
    results["git status --porcelain (dirty 100)"] = median_of(lambda: git_status(repo), args.runs)
    results["git stash create (dirty 100)"] = median_of(lambda: stash_create(repo), args.runs)
    results["git add -A && write-tree, temp index (dirty 100)"] = median_of(lambda: temp_index_write_tree(repo), args.runs)

    def snapshot_after_dirty():
        # A different seed each time so every sample sees 100 fresh changes.
        seed = str(1000 + len(samples))
        samples.append(seed)
        subprocess.run(["bash", os.path.join(shared, "dirty.sh"), repo, "100", seed], check=True, stdout=subprocess.DEVNULL)
        return ckpt_snapshot(repo)
    samples = []
    results["ckpt snapshot: after dirty.sh 100"] = median_of(snapshot_after_dirty, args.runs)
    rss_dirty = peak_rss_kib([ckpt, "snapshot"], repo)

    # The same with the watch daemon: only the changed paths are listed and read.
    subprocess.run([ckpt, "watch", "start"], cwd=repo, check=True, stdout=subprocess.DEVNULL)
    for _ in range(2):
        run([ckpt, "snapshot", "--watch"], repo)

    def watched_after_dirty():
        seed = str(3000 + len(samples))
        samples.append(seed)
        subprocess.run(["bash", os.path.join(shared, "dirty.sh"), repo, "100", seed], check=True, stdout=subprocess.DEVNULL)
        return run([ckpt, "snapshot", "--watch"], repo)[0]
    results["ckpt snapshot --watch: after dirty.sh 100"] = median_of(watched_after_dirty, args.runs)
    mode = json.loads(subprocess.run([ckpt, "--json", "snapshot", "--watch"], cwd=repo, capture_output=True, text=True).stdout.strip().splitlines()[-1])["scan"]["mode"]
    if mode != "watch":
        print(f"warning: the watched snapshots were not served by the daemon (mode {mode})", file=sys.stderr)
    subprocess.run([ckpt, "watch", "stop"], cwd=repo, stdout=subprocess.DEVNULL)

    def restore_sample():
        seed = str(2000 + len(samples))
        samples.append(seed)
        subprocess.run([ckpt, "restore", base_id, "--yes", "--exact"], cwd=repo, check=True, stdout=subprocess.DEVNULL)
        subprocess.run(["bash", os.path.join(shared, "dirty.sh"), repo, "100", seed], check=True, stdout=subprocess.DEVNULL)
        return run([ckpt, "restore", base_id, "--yes", "--exact"], repo)[0]
    results["ckpt restore: ~210 changed paths incl. guard + verify"] = median_of(restore_sample, args.runs)

    status_clean = results["git status --porcelain (clean)"]
    status_dirty = results["git status --porcelain (dirty 100)"]
    # The project's targets (issue 4), as ratios against git status in the same run.
    targets = {
        "ckpt snapshot: no-op": 0.5,
        "ckpt snapshot --watch: no-op": 0.1,
        "ckpt snapshot: after dirty.sh 100": 1.0,
        "ckpt snapshot --watch: after dirty.sh 100": 0.3,
        "ckpt snapshot: first in a fresh clone": 2.0,
        "ckpt restore: ~210 changed paths incl. guard + verify": 1.5,
        "ckpt status": 2.0,
    }
    print(f"\nckpt bench: {args.files} files, median of {args.runs} runs, {os.cpu_count()} cores")
    print(f"{'measurement':58} {'median':>10} {'vs git status':>14}  target")
    for name, secs in results.items():
        ref = status_dirty if "dirty" in name or "restore" in name else status_clean
        ratio = secs / ref
        goal = targets.get(name)
        verdict = "" if goal is None else f"  <= {goal:.1f}x {'met' if ratio <= goal else 'MISSED'}"
        print(f"{name:58} {secs*1000:8.1f}ms {ratio:13.2f}x{verdict}")
    for label, rss in [("peak RSS, no-op snapshot", rss_noop), ("peak RSS, snapshot after dirty", rss_dirty), ("RSS of the watch daemon", rss_daemon)]:
        if rss is not None:
            print(f"{label:58} {rss/1024:8.1f}MB {'':14}  <= 100 MB {'met' if rss / 1024 <= 100 else 'MISSED'}")
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
