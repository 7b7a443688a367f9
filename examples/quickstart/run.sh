#!/usr/bin/env bash
# The quickstart's README, as one script: install the job package, create a jobgate folder,
# apply and approve the declared jobs, start a server, run the application. Uses the `jobgate`
# and `python` first on PATH (jobgate's environment). Usage: run.sh [FOLDER] (default: ./qs).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
FOLDER=${1:-qs}
PORT=${JOBGATE_QUICKSTART_PORT:-18080}

python -m pip install -q -e "$HERE"
jobgate init "$FOLDER" >/dev/null
cd "$FOLDER"
jobgate apply --module quickstart.jobs --approve
JOBGATE_TOKEN=$(jobgate tokens create --role operator --label quickstart 2>/dev/null)
URL="http://127.0.0.1:$PORT"
jobgate serve --port "$PORT" >serve.log 2>&1 &
SERVER=$!
trap 'kill "$SERVER" 2>/dev/null; wait "$SERVER" 2>/dev/null || true' EXIT
python - "$URL" <<'PY'
import sys, time, urllib.request
deadline = time.monotonic() + 60
while True:  # until the server answers /readyz
    try:
        if urllib.request.urlopen(sys.argv[1] + "/readyz", timeout=1).status == 200:
            break
    except OSError:
        if time.monotonic() > deadline:
            sys.exit("the server did not become ready; see serve.log")
        time.sleep(0.2)
PY
JOBGATE_TOKEN=$JOBGATE_TOKEN JOBGATE_SERVER=$URL python "$HERE/app.py"  # the CLI reads them too: only the app gets them
