"""Job kinds and optional signed plugins: the catalogue, plugin files and signatures, admission.

Kept free of imports from ``admission`` here: ``jobgate.config`` imports the catalogue, and
admission imports ``jobgate.config``.
"""

from jobgate.plugins.catalog import BUILT_INS, CATALOG, JobKind, KindClass, require_builtins

__all__ = ["BUILT_INS", "CATALOG", "JobKind", "KindClass", "require_builtins"]
