"""RFC 3161 timestamps on anchors: a third party's signed word that an anchor existed by then.

The evidence key's signature (``evidence.keys``) says *who* made an anchor; it cannot say
*when*: whoever holds the key can sign a rewritten history with yesterday's dates. A
timestamping authority (TSA) can: it signs the anchor's digest with its own clock, under a
certificate chained to a root the auditor trusts, and a token cannot be made later for an
earlier time. jobgate asks the configured TSA (``evidence.timestamp_authority``) for a token
on every batch anchor it makes and keeps the token with the anchor (its row, the sink's copy,
evidence bundles); ``audit verify`` and ``evidence verify --tsa-ca`` check each token offline
against the configured roots: the token's signature and certificate chain, that it is for this
anchor's content (``anchors.anchor_message``), and that its time agrees with the anchor's.

A direct anchor (one critical entry, at once) is not stamped on its own: asking a remote
service in the transaction that switches safe mode on would let an unreachable TSA block it.
The next batch anchor's content names the previous chain, which names every anchor before it,
so that anchor's token dates the direct one too.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from cryptography import x509
from rfc3161_client import (
    HashAlgorithm,
    TimestampRequestBuilder,
    VerificationError,
    VerifierBuilder,
    decode_timestamp_response,
)

from jobgate.config.timestamps import TimestampSettings
from jobgate.core.errors import JobgateError, ValidationError

QUERY_TYPE = "application/timestamp-query"
REPLY_TYPE = "application/timestamp-reply"
FIELD = "evidence.timestamp_authority"


class TimestampUnavailable(JobgateError):
    """The TSA gave no usable token: the anchor is not made (its job's retry policy applies)."""

    code = "timestamp_unavailable"


def load_roots(path: Path, *, field: str = f"{FIELD}.ca_bundle") -> tuple[x509.Certificate, ...]:
    """The certificates of a PEM file, or a ``ValidationError`` naming the field."""
    try:
        found = x509.load_pem_x509_certificates(path.read_bytes())
    except OSError as exc:
        raise ValidationError(f"cannot read {path} ({exc.strerror or type(exc).__name__})", field=field) from None
    except ValueError:
        raise ValidationError(f"{path} holds no PEM certificate", field=field) from None
    return tuple(found)


@dataclass(frozen=True)
class TimestampTrust:
    """What a token is checked against; built from the settings (or an auditor's PEM file)."""

    roots: tuple[x509.Certificate, ...]
    max_skew: timedelta = timedelta(minutes=5)
    unstamped_before: int = 0

    @classmethod
    def of(cls, settings: TimestampSettings) -> TimestampTrust:
        return cls(load_roots(settings.ca_bundle), settings.max_skew, settings.unstamped_anchors_before)

    def problem(self, token: str, message: str, *, created_at: datetime, not_before: datetime) -> str | None:
        """What is wrong with ``token`` (base64 of a DER TimeStampResp) as the stamp of
        ``message`` made at ``created_at``, if anything. ``not_before``: the token cannot be
        older than this (a batch anchor's window end: it did not exist before its window)."""
        try:
            response = decode_timestamp_response(base64.b64decode(token, validate=True))
        except (ValueError, binascii.Error):
            return "has a timestamp token that is not an RFC 3161 response"
        roots, intermediates = _split(self.roots)
        try:
            VerifierBuilder(roots=list(roots), intermediates=list(intermediates)).build().verify_message(
                response, message.encode("utf-8")
            )
        except VerificationError as exc:
            return f"has a timestamp token that does not verify ({_reason(exc)})"
        at = response.tst_info.gen_time
        at = at if at.tzinfo else at.replace(tzinfo=UTC)
        if at < not_before - self.max_skew:
            return f"was timestamped at {at.isoformat()}, before its window ended ({not_before.isoformat()})"
        if abs(at - created_at) > self.max_skew:
            return (
                f"was timestamped at {at.isoformat()} but says it was made at {created_at.isoformat()}"
                f" (more than {int(self.max_skew.total_seconds())} s apart)"
            )
        return None


def _split(certs: Sequence[x509.Certificate]) -> tuple[list[x509.Certificate], list[x509.Certificate]]:
    """Self-signed certificates are roots; the others intermediates a chain may pass through."""
    roots = [c for c in certs if c.issuer == c.subject]
    return roots or list(certs), [c for c in certs if c.issuer != c.subject]


def _reason(exc: VerificationError) -> str:
    """The verifier's reason in a line, without the cryptographic library's error stack."""
    text = str(exc).strip()
    if "pkcs7" in text.lower() or "ErrorStack" in text:
        return "its signature or certificate chain does not verify against the trusted roots"
    return text.splitlines()[0][:200] if text else type(exc).__name__


class TimestampAuthority:
    """The client: asks the TSA for a token over an anchor's message, checks it at once."""

    def __init__(self, settings: TimestampSettings) -> None:
        self.settings = settings
        self.trust = TimestampTrust.of(settings)

    def stamp(self, message: str, *, created_at: datetime, not_before: datetime) -> str:
        """A verified token (base64 DER) over ``message``; ``TimestampUnavailable`` otherwise.
        The URL is configuration (it may carry a credential): never in a message."""
        import httpx

        request = TimestampRequestBuilder().data(message.encode("utf-8")).hash_algorithm(HashAlgorithm.SHA256)
        query = request.nonce(nonce=True).cert_request(cert_request=True).build()
        try:
            answer = httpx.post(
                self.settings.url,
                content=query.as_bytes(),
                headers={"Content-Type": QUERY_TYPE, "Accept": REPLY_TYPE},
                timeout=self.settings.timeout.total_seconds(),
            )
            answer.raise_for_status()
        except httpx.HTTPError as exc:
            why = f"the timestamping authority did not answer ({type(exc).__name__})"
            raise TimestampUnavailable(why, field=FIELD) from None
        token = base64.b64encode(answer.content).decode("ascii")
        try:
            response = decode_timestamp_response(answer.content)
        except ValueError:
            why = "the timestamping authority's answer is not an RFC 3161 response"
            raise TimestampUnavailable(why, field=FIELD) from None
        if response.tst_info.nonce != query.nonce:
            raise TimestampUnavailable("the timestamping authority answered another request (nonce)", field=FIELD)
        problem = self.trust.problem(token, message, created_at=created_at, not_before=not_before)
        if problem is not None:
            raise TimestampUnavailable(f"the anchor {problem}", field=FIELD)
        return token


def authority_for(config: object) -> TimestampAuthority | None:
    """The configured TSA client, or None when the deployment stamps nothing."""
    settings = getattr(getattr(config, "evidence", None), "timestamp_authority", None)
    return None if settings is None else TimestampAuthority(settings)


def trust_for(config: object) -> TimestampTrust | None:
    settings = getattr(getattr(config, "evidence", None), "timestamp_authority", None)
    return None if settings is None else TimestampTrust.of(settings)
