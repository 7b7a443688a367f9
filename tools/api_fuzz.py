"""Fuzz the HTTP API with schemathesis against a real ``jobgate serve``.

Starts a server on a fresh demo folder (SQLite, a free port, the bootstrap admin token),
runs schemathesis over ``/openapi.json`` with a fixed seed — no 5xx, every response
matching its documented status, content type and schema — and stops the server.

    python tools/api_fuzz.py --short     # CI: a few examples per operation (about a minute)
    python tools/api_fuzz.py             # people: many more examples, stateful links too

The exit status is schemathesis's: non-zero on any failure.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from jobgate.governance import signing

CHECKS = "not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--short", action="store_true", help="CI mode: few examples per operation")
    p.add_argument("--seed", type=int, default=20261130)
    p.add_argument("--max-examples", type=int, help="examples per operation (default: 10 short, 200 long)")
    args = p.parse_args()
    examples = args.max_examples or (10 if args.short else 200)
    phases = "examples,coverage,fuzzing" if args.short else "examples,coverage,fuzzing,stateful"
    work = Path(tempfile.mkdtemp(prefix="jobgate-fuzz-"))
    env = {k: v for k, v in os.environ.items() if k not in {"JOBGATE_DATABASE_URL", "JOBGATE_CONFIG"}}
    jobgate = [sys.executable, "-m", "jobgate"]
    subprocess.run([*jobgate, "init", "site"], cwd=work, env=env, check=True, capture_output=True)
    site, port = work / "site", free_port()
    # A trust root for offline seeds, so an import is verified (and garbage refused with a 4xx)
    # rather than refused whole with the documented 503 of a deployment that trusts no key.
    with (site / "jobgate.yaml").open("a", encoding="utf-8") as config:
        config.write(f"\npacks:\n  trusted_keys: [{signing.generate('fuzz-root').public_b64}]\n")
    token_file = site / "admin.token"
    log = (site / "serve.log").open("wb")
    server = subprocess.Popen(
        [*jobgate, "serve", "--port", str(port), "--bootstrap-token-file", str(token_file)],
        cwd=site,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{url}/readyz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.2)
        token = token_file.read_text().strip()
        cmd = [
            str(Path(sys.executable).with_name("schemathesis")),
            "run",
            f"{url}/openapi.json",
            "--header",
            f"Authorization: Bearer {token}",
            "--checks",
            CHECKS,
            "--phases",
            phases,
            "--max-examples",
            str(examples),
            "--seed",
            str(args.seed),
            "--workers",
            "1",
            "--request-timeout",
            "10",
            "--suppress-health-check",
            "all",
        ]
        print(f"fuzzing {url} ({phases}, {examples} examples per operation, seed {args.seed})", flush=True)
        return subprocess.run(cmd, env=env).returncode
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()
        if server.returncode not in (0, None):
            print((site / "serve.log").read_text()[-3000:], file=sys.stderr)
        if not os.environ.get("JOBGATE_FUZZ_KEEP"):
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
