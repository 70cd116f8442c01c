#!/usr/bin/env python3
"""Prometheus's promtool, built from the Go module proxy, for the alerting rules' unit tests
(issue 20: deploy/prometheus/rackplane-rules.yml, tested by rules_test.yml beside it).

Theory of operation
-------------------
1. Build. `go install github.com/prometheus/prometheus/cmd/promtool@vVERSION` (the module's
   v0.3xx.y tags are Prometheus 3.x's releases) with CGO off, `-trimpath` and the build tag
   `remove_all_sd` (no service discovery plugins: most of the build), into one cache
   directory keyed by the version: `$RACKPLANE_CACHE/promtool-<version>`, else
   `~/.cache/rackplane/promtool-<version>`, which holds the binary, GOCACHE, GOMODCACHE and
   GOPATH. A stamp file names what the binary was built with (promtool's version, Go's
   version, GOPROXY, GOFLAGS, GOOS/GOARCH, the ldflags and tags): a binary whose stamp
   matches is used as it is; any other is rebuilt (the warm GOCACHE makes that quick). A
   cold build took 3 minutes on 2 busy cores (downloads included).
2. Test. `promtool check rules` on every rules file, then `promtool test rules` on every test
   file (default: deploy/prometheus/rules_test.yml), each from the test file's folder, as
   promtool resolves `rule_files` there. The exit status is promtool's first failure (0: all
   passed). When promtool cannot be built it exits with status 3 and says why, with the tail
   of Go's output: it never skips.

CLI::

    python scripts/prometheus/promtool.py build              # only build (or find) promtool
    python scripts/prometheus/promtool.py test [TEST.yml...] # check and unit-test the rules
    python scripts/prometheus/promtool.py run -- ARGS...     # promtool ARGS

Standard library only; no rackplane imports (this must run before anything is installed).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

PROMTOOL_VERSION = "0.316.0"
"""github.com/prometheus/prometheus module version (Prometheus 3.16's release)."""
PACKAGE = "github.com/prometheus/prometheus/cmd/promtool"
LDFLAGS = f"-s -w -X github.com/prometheus/common/version.Version={PROMTOOL_VERSION}"
TAGS = "remove_all_sd"
"""Without the service discovery plugins (AWS, Azure, GCE, Kubernetes, ...): the rules' tests
need none, and they are most of the build (promtool then cannot check a scrape config's SD)."""
EXIT_FAILED = 3
ROOT = Path(__file__).resolve().parents[2]
DEFAULT_TESTS = (ROOT / "deploy" / "prometheus" / "rules_test.yml",)
_TAIL_LINES = 40


class BuildError(RuntimeError):
    """promtool could not be built."""


def say(message: str) -> None:
    """One progress line, to stderr (promtool's output stays on stdout)."""
    print(f"[promtool] {message}", file=sys.stderr, flush=True)


def default_cache_dir() -> Path:
    """`$RACKPLANE_CACHE/promtool-<version>`, else under `~/.cache/rackplane`."""
    root = os.environ.get("RACKPLANE_CACHE")
    base = Path(root).expanduser() if root else Path.home() / ".cache" / "rackplane"
    return base / f"promtool-{PROMTOOL_VERSION}"


def go_env(cache: Path) -> dict[str, str]:
    """The environment of every `go` call: all caches inside `cache`, no cgo, this toolchain.
    GOFLAGS is emptied (`go install pkg@version` takes no -mod); the go env file's flags
    still apply, and the stamp records them."""
    dirs = {"GOCACHE": "gocache", "GOMODCACHE": "gomod", "GOPATH": "gopath"}
    fixed = {"GOFLAGS": "", "GOTOOLCHAIN": "local", "CGO_ENABLED": "0"}
    return {**os.environ, **{k: str(cache / v) for k, v in dirs.items()}, **fixed}


def _go(go: str, args: list[str], cache: Path, timeout: float = 3600) -> str:
    """`go ARGS` in `cache`; its stdout."""
    try:
        done = subprocess.run(
            [go, *args], cwd=cache, env=go_env(cache), stdin=subprocess.DEVNULL,
            capture_output=True, text=True, timeout=timeout, check=False,
        )  # fmt: skip
    except subprocess.TimeoutExpired as err:
        raise BuildError(f"`go {' '.join(args)}` did not finish in {timeout:.0f} s") from err
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-_TAIL_LINES:])
        raise BuildError(f"`go {' '.join(args)}` failed (exit {done.returncode}):\n{tail}")
    return done.stdout


def stamp(go: str, cache: Path) -> str:
    """What a binary built now would be built with."""
    names = ["GOVERSION", "GOPROXY", "GOFLAGS", "GOOS", "GOARCH"]
    values = _go(go, ["env", *names], cache).splitlines()
    return json.dumps(
        {
            "promtool": PROMTOOL_VERSION,
            "ldflags": LDFLAGS,
            "tags": TAGS,
            **dict(zip(names, values, strict=True)),
        }
    )


def build(cache_dir: Path | None = None) -> Path:
    """The path of promtool, built unless the cache holds one with the same stamp.

    Raises:
        BuildError: Go is missing, or the build failed (its output's tail in the message).
    """
    cache = (cache_dir or default_cache_dir()).expanduser().resolve()
    cache.mkdir(parents=True, exist_ok=True)
    binary = cache / "bin" / "promtool"
    done = cache / "bin" / "STAMP"
    go = shutil.which("go") or "/usr/local/go/bin/go"
    if not Path(go).exists():
        raise BuildError("Go is not on PATH (nor in /usr/local/go/bin): it builds promtool")
    wanted = stamp(go, cache)
    if binary.exists() and done.exists() and done.read_text() == wanted:
        return binary
    started = time.monotonic()
    say(f"building promtool {PROMTOOL_VERSION} into {cache}: ~3-5 min cold on 2 cores ...")
    install = ["install", "-trimpath", "-tags", TAGS, "-ldflags", LDFLAGS]
    _go(go, [*install, f"{PACKAGE}@v{PROMTOOL_VERSION}"], cache)
    binary.parent.mkdir(parents=True, exist_ok=True)
    partial = binary.with_name(".promtool.partial")
    shutil.copy2(cache / "gopath" / "bin" / "promtool", partial)
    partial.replace(binary)
    done.write_text(wanted)
    say(f"built in {time.monotonic() - started:.0f} s")
    return binary


def rule_files(test: Path) -> list[Path]:
    """The `rule_files` a promtool test file names (one per line, `  - NAME`), beside it."""
    out: list[Path] = []
    listing = False
    for line in test.read_text().splitlines():
        if line.startswith("rule_files:"):
            listing = True
        elif listing and line.strip().startswith("- "):
            out.append(test.parent / line.strip()[2:].strip().strip("'\""))
        elif listing and line.strip() and not line.startswith((" ", "#")):
            listing = False
    return out


def test(promtool: Path, tests: list[Path]) -> int:
    """Check every rules file the tests name, then run the tests; promtool's first failing
    status (0: every check and test passed)."""
    for t in tests:
        if not t.exists():
            say(f"no such test file: {t}")
            return 2
        rules = rule_files(t)
        for step in (["check", "rules", *map(str, rules)], ["test", "rules", t.name]):
            status = subprocess.call([str(promtool), *step], cwd=t.parent)
            if status != 0:
                return status
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="promtool.py", description=f"promtool {PROMTOOL_VERSION}, built from the module proxy"
    )
    parser.add_argument("--cache-dir", type=Path, default=None, help="where the build lives")
    sub = parser.add_subparsers(dest="action", required=True)
    sub.add_parser("build", help="only build (or find) promtool")
    t = sub.add_parser("test", help="promtool check rules + test rules")
    t.add_argument("tests", nargs="*", type=Path, help="promtool test files")
    run = sub.add_parser("run", help="run promtool with ARGS")
    run.add_argument("args", nargs=argparse.REMAINDER, help="-- ARGS...")
    args = parser.parse_args(argv)
    try:
        promtool = build(args.cache_dir)
    except BuildError as err:
        say(f"error: {err}")
        return EXIT_FAILED
    if args.action == "build":
        say(f"promtool ready: {promtool}")
        return 0
    if args.action == "test":
        return test(promtool, [p.resolve() for p in args.tests] or list(DEFAULT_TESTS))
    extra = list(args.args)
    return subprocess.call([str(promtool), *(extra[1:] if extra[:1] == ["--"] else extra)])


if __name__ == "__main__":
    sys.exit(main())
