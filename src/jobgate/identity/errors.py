"""The refusals an identity provider's answer can lead to, beside ``Unauthenticated`` (401)."""

from __future__ import annotations

from jobgate.core.errors import JobgateError, ValidationError


class IdentityProviderUnavailable(JobgateError):
    """The provider's keys or directory could not be reached (503): the request is refused,
    never let through, and the client may try again later."""

    code = "identity_provider_unavailable"

    def __init__(self) -> None:
        super().__init__("the identity provider cannot be reached; try again later")


class TenantMissing(ValidationError):
    """A valid token that names no tenant (seed 001: 400 ``tenant_missing``): the tenant comes
    from a signed claim, never from a header or the body."""

    code = "tenant_missing"

    def __init__(self, claim: str) -> None:
        super().__init__(f"the token has no {claim!r} claim naming its tenant", field=claim)
