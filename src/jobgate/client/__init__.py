"""jobgate from application code: ``Client`` talks to a jobgate server over its HTTP API;
``connect`` submits into a jobgate database directly (an application embedding jobgate, its
workers elsewhere). Both answer with the API's own typed models (``RunOut``, ``RunDetailOut``)
and go through the same code as ``jobgate submit`` and ``jobgate runs …`` (``client.runs``)."""

from jobgate.client.api import Client, Embedded, connect

__all__ = ["Client", "Embedded", "connect"]
