"""Alerting and dependency health (seed 000 §5 "Alerting and Escalation", §58 failure handling):
the pure alert and dependency rules (``rules``) and the probes that check a dependency (``probes``).
Their settings are read with the configuration (``jobgate.config.health``)."""
