"""Multi-step workflows: definitions with steps, a pure planner, and the coordinator's edge."""
