"""The HTTP API (``jobgate serve``)."""
