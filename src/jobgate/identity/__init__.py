"""Who is calling: credentials from identity providers turned into principals.

``tokens`` (``service.tokens``) are jobgate's own; ``oidc`` checks bearer JWTs of an OpenID
Connect provider; ``authenticator`` picks the one a request's ``Authorization`` header names.
Every provider answers a bad credential the same way (401, the reason in the log only), an
unreachable provider with 503, and never lets a request through on failure.
"""
