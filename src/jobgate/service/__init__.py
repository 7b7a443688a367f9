"""Use cases: one function per thing a user can ask, one transaction per decision."""
