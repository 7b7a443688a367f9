"""DAL Batch (seed 000 §8, §30-31): collect candidates, build the Merkle tree, submit the root to
the ledger, verify the ledger reference, publish the inclusion proofs.

Candidates are the anchor candidates the engines queued (``dal/candidates.jsonl``); a batch
takes those created inside its window, in a deterministic order, so the same window always
gives the same tree. The tree is jobgate's own (``jobgate.core.merkle``: the rules an auditor
can re-implement), the ledger is the DAL stand-in's hash-chained file behind the endpoint.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from jobgate import ExecutionContext
from jobgate.core import merkle
from jobgate_examples.common import (
    digest,
    get_json,
    home,
    invalid,
    param,
    parse_instant,
    post_json,
    read_json,
    read_lines,
    safe_id,
    write_json,
)
from jobgate_examples.ledger import entry_hash


def _batch_dir(ctx: ExecutionContext) -> Path:
    return home(ctx) / "dal" / "batches" / safe_id(param(ctx, "batch_id"), "batch_id")


def collect(ctx: ExecutionContext) -> dict[str, Any]:
    """The candidates created in ``[window_from, window_to)``, ordered by (time, id)."""
    start = parse_instant(param(ctx, "window_from"), "window_from")
    end = parse_instant(param(ctx, "window_to"), "window_to")
    if end <= start:
        raise invalid("window_to must be after window_from")
    chosen = sorted(
        (c for c in read_lines(home(ctx) / "dal" / "candidates.jsonl")
         if start <= parse_instant(c["created_at"], "created_at") < end),
        key=lambda c: (c["created_at"], c["artifact_id"]),
    )  # fmt: skip
    write_json(_batch_dir(ctx) / "candidates.json", chosen)
    ctx.log(f"batch {param(ctx, 'batch_id')}: {len(chosen)} candidates in the window")
    return {"candidate_count": len(chosen), "candidates_sha256": digest(chosen)}


def build_tree(ctx: ExecutionContext) -> dict[str, Any]:
    """One leaf per candidate's artifact hash; the proofs are written beside the root."""
    candidates = read_json(_batch_dir(ctx) / "candidates.json", "the batch's candidates")
    if digest(candidates) != param(ctx, "candidates_sha256"):
        raise invalid("the candidate list changed after it was collected", "CANDIDATES_CHANGED")
    leaves = [c["artifact_hash"] for c in candidates]
    root = merkle.root(leaves)
    proofs = [
        {"artifact_id": c["artifact_id"], "artifact_hash": c["artifact_hash"], "proof": merkle.proof(leaves, i)}
        for i, c in enumerate(candidates)
    ]
    write_json(_batch_dir(ctx) / "tree.json", {"root": root, "leaf_count": len(leaves), "proofs": proofs})
    return {"root": root, "leaf_count": len(leaves)}


def submit_root(ctx: ExecutionContext) -> dict[str, Any]:
    """Anchor the root in the DAL ledger (the run's idempotency key: a retry anchors once)."""
    answer = post_json(
        ctx,
        "/dal/anchors",
        {"artifact_type": "DALBatchRoot", "artifact_id": param(ctx, "batch_id"), "artifact_hash": param(ctx, "root")},
        "submit the batch root",
    )
    return {"ledger_ref": answer["ledger_ref"], "ledger_sequence": answer["sequence"]}


def verify_ref(ctx: ExecutionContext) -> dict[str, Any]:
    """Read the entry back from the ledger: it must hold this root for this batch, and its own
    hash must recompute (the ledger did not rewrite it)."""
    entry = get_json(ctx, f"/dal/anchors/{safe_id(param(ctx, 'ledger_ref'), 'ledger_ref')}", "read the ledger entry")
    if entry.get("artifact_hash") != param(ctx, "root") or entry.get("artifact_id") != param(ctx, "batch_id"):
        raise invalid(f"ledger entry {entry.get('ledger_ref')} does not hold this batch's root", "LEDGER_MISMATCH")
    if entry.get("entry_hash") != entry_hash(entry):
        raise invalid(f"ledger entry {entry.get('ledger_ref')} does not match its own hash", "LEDGER_MISMATCH")
    return {"ledger_verified": True}


def publish_proof(ctx: ExecutionContext) -> dict[str, Any]:
    """Check every inclusion proof against the anchored root, then publish one file per artifact."""
    tree = read_json(_batch_dir(ctx) / "tree.json", "the batch's tree")
    root, ledger_ref = param(ctx, "root"), param(ctx, "ledger_ref")
    if tree["root"] != root:
        raise invalid("the tree on disk is not the anchored one", "TREE_CHANGED")
    out = home(ctx) / "dal" / "proofs" / safe_id(param(ctx, "batch_id"), "batch_id")
    for p in tree["proofs"]:
        if not merkle.verify(p["artifact_hash"], p["proof"], root):
            raise invalid(f"the proof of {p['artifact_id']} does not reach the root", "PROOF_INVALID")
        write_json(
            out / f"{safe_id(p['artifact_id'], 'artifact_id')}.json", {**p, "root": root, "ledger_ref": ledger_ref}
        )
    return {"proofs_published": len(tree["proofs"])}
