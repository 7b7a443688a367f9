"""The DAL stand-in's ledger: an append-only, hash-chained file of anchored artifact hashes.

Each entry carries the hash of the entry before it and its own hash over its content, so a
changed, removed or reordered entry breaks the chain from there on (``chain_problems`` says
where). An append with an idempotency key already in the ledger returns that entry instead of
anchoring twice (a retried submission); the same key with a different hash is a conflict.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

from jobgate.core.canonical import canonical_json, digest

GENESIS = "sha256:" + "0" * 64
_FIELDS = ("sequence", "ledger_ref", "artifact_type", "artifact_id", "artifact_hash", "prev_hash")


class LedgerConflict(ValueError):
    """The idempotency key was used before for a different artifact hash."""


def entry_hash(entry: dict[str, Any]) -> str:
    return digest({k: entry[k] for k in _FIELDS})


def chain_problems(entries: list[dict[str, Any]]) -> list[str]:
    """Every place the chain does not hold: a wrong sequence, a broken link, a rewritten entry."""
    problems: list[str] = []
    prev = GENESIS
    for i, e in enumerate(entries, start=1):
        if e.get("sequence") != i:
            problems.append(f"entry {i}: sequence {e.get('sequence')}")
        if e.get("prev_hash") != prev:
            problems.append(f"entry {i}: does not link to entry {i - 1}")
        if e.get("entry_hash") != entry_hash(e):
            problems.append(f"entry {i}: content changed after it was written")
        prev = str(e.get("entry_hash"))
    return problems


class Ledger:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()

    def entries(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        lines = self.path.read_text(encoding="utf-8").splitlines()
        return [json.loads(line) for line in lines if line.strip()]

    def get(self, ledger_ref: str) -> dict[str, Any] | None:
        return next((e for e in self.entries() if e["ledger_ref"] == ledger_ref), None)

    def append(
        self, artifact_type: str, artifact_id: str, artifact_hash: str, idempotency_key: str
    ) -> tuple[dict[str, Any], bool]:
        """The entry and whether it is new."""
        with self._lock:
            entries = self.entries()
            for e in entries:
                if e["idempotency_key"] == idempotency_key:
                    if e["artifact_hash"] != artifact_hash:
                        raise LedgerConflict(f"idempotency key already anchored {e['artifact_hash']}")
                    return e, False
            seq = len(entries) + 1
            entry: dict[str, Any] = {
                "sequence": seq,
                "ledger_ref": f"DAL-{seq:06d}",
                "artifact_type": artifact_type,
                "artifact_id": artifact_id,
                "artifact_hash": artifact_hash,
                "prev_hash": entries[-1]["entry_hash"] if entries else GENESIS,
                "idempotency_key": idempotency_key,
            }
            entry["entry_hash"] = entry_hash(entry)
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            try:
                os.write(fd, canonical_json(entry) + b"\n")
                os.fsync(fd)
            finally:
                os.close(fd)
            return entry, True
