"""Governance shells: reading what code a definition executes on this host."""
