"""The pure decision core: no I/O, no clock reads, imports nothing outside ``jobgate.core``.

Everything jobgate decides (which run a trigger maps to, whether a transition is legal,
when a retry is due, whether a run is dead-lettered) is a function of values passed in
here, so the same inputs always give the same decision and a replay can reproduce it.
"""
