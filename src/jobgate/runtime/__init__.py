"""Long-running loops (worker, outbox publisher, rescuer) and the executors they drive."""
