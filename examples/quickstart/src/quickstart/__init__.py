"""The quickstart's jobs: ``quickstart.jobs``, applied with ``jobgate apply --module quickstart.jobs``."""
