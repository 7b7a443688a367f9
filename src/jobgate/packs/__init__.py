"""Packs (seed 001 §6-7): the registry, its offline-seed archive and DSSE envelopes."""
