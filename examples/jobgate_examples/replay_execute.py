"""``python -m jobgate_examples.replay_execute REPLAY_ID``: the replay itself, as a command.

Run by the ``replay-pipeline`` runner (``jobgate.yaml`` names the binary, the arguments and
``JOBGATE_EXAMPLES_HOME``). It re-reads the manifest, checks its input hash, runs the recorded
pipeline version on the recorded inputs, writes the output next to the manifest, and reports
``replay_hash`` to jobgate through the outputs file ``$JOBGATE_OUTPUTS``.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

from jobgate.core.canonical import canonical_json, digest
from jobgate_examples.pipeline import score


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not re.fullmatch(r"TGWF-[0-9]{4}-[0-9a-f]{20}", argv[0]):
        print("usage: replay_execute TGWF-…", file=sys.stderr)
        return 2
    folder = Path(os.environ["JOBGATE_EXAMPLES_HOME"]) / "replay" / "runs" / argv[0]
    manifest = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
    if digest({"inputs": manifest["inputs"], "pipeline": manifest["pipeline"]}) != manifest["input_hash"]:
        print("manifest inputs do not match their hash", file=sys.stderr)
        return 3
    pipeline = manifest["pipeline"]
    output = score(manifest["inputs"], pipeline["weights"], pipeline["score_threshold"])
    (folder / "replay-output.json").write_bytes(canonical_json(output))
    outputs = {"replay_hash": digest(output), "score": output["score"], "decision": output["decision"]}
    Path(os.environ["JOBGATE_OUTPUTS"]).write_text(json.dumps(outputs), encoding="utf-8")
    print(f"replayed {manifest['signal_id']} with {pipeline['version']}: {output}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
