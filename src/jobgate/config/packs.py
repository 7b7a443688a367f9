"""The ``packs`` section of ``jobgate.yaml``: whom an offline-seed import trusts, and whether
approvals carried by a trusted archive are honoured.

``trusted_keys`` are base64 Ed25519 public keys (the exporting deployment's evidence key, as
``jobgate keys evidence`` prints it). With none, ``POST /api/v1/import/offline-seed`` answers
503: an import is only ever of a verified archive, and nothing can be verified without a root.
``import_approvals`` (default false) lets approvals recorded in a verified archive approve the
imported definitions here; otherwise every imported definition arrives unapproved.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from typing import Any

from jobgate.documents import Reader

_KEYS = ("trusted_keys", "import_approvals")


@dataclass(frozen=True)
class PackSettings:
    trusted_keys: tuple[str, ...] = ()
    import_approvals: bool = False


def parse_pack_settings(r: Reader, value: Any) -> PackSettings:
    """The ``packs`` section, each key checked now (a key that is not an Ed25519 public key is
    an error naming its position, not a refusal at the first import)."""
    if value is None:
        return PackSettings()
    doc = r.mapping(value, "packs")
    r.only_keys(doc, "packs", _KEYS)
    keys = r.strings(doc.get("trusted_keys", []), "packs.trusted_keys", unique=True)
    for i, key in enumerate(keys):
        try:
            raw = base64.b64decode(key.strip(), validate=True)
        except (binascii.Error, ValueError):
            raw = b""
        if len(raw) != 32:
            r.fail(f"packs.trusted_keys[{i}]", "not a base64 Ed25519 public key (32 bytes)")
    approvals = r.boolean(doc["import_approvals"], "packs.import_approvals") if "import_approvals" in doc else False
    return PackSettings(tuple(k.strip() for k in keys), approvals)
