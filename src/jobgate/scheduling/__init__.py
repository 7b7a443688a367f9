"""Schedules and their plans: which fires a schedule owes, decided by pure functions.

The scheduler loop (``jobgate.runtime``) only executes plans, so a restart neither duplicates
nor skips a fire: the plan is a function of the schedule, what was already planned, and now.
"""
