"""Step handlers and local stand-in engines for the seed 000 §8 workflow examples.

Importable by a jobgate worker when ``examples/`` is on the path (``PYTHONPATH=examples``);
``run_all.py`` puts it there itself.
"""

__all__: list[str] = []
