"""``evidence.timestamp_authority``'s settings, apart from the RFC 3161 client
(``evidence.timestamping``): reading a configuration loads no X.509 or ASN.1 code."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path


@dataclass(frozen=True)
class TimestampSettings:
    """``evidence.timestamp_authority``: where tokens come from and what they are checked with.

    ``ca_bundle`` holds the PEM certificates a token's chain must end in (the TSA's root, and
    any intermediates it does not send). ``max_skew`` bounds how far a token's time may lie
    from the anchor's own ``created_at`` (the two clocks, and the round trip between them).
    Batch anchors numbered below ``unstamped_anchors_before`` were made before the TSA was
    configured (an upgrade) and are accepted without a token; every later one must carry one.
    """

    url: str
    ca_bundle: Path
    timeout: timedelta = timedelta(seconds=10)
    max_skew: timedelta = timedelta(minutes=5)
    unstamped_anchors_before: int = 0
