"""The web console: server-rendered pages for the people who approve, operate and audit.

It is a face, like the API and the CLI: its pages call the same services under the same access
rules (``api.access``), with the caller taken from a session cookie (``identity.sessions``) made
when someone signs in (``console.signin``) through the same providers as the API.
"""
