"""A package of declared jobs for the tests (imported from ``tests.declared.shop``)."""
