"""The session core: a strategy, its plugin stack and the trial bookkeeping, with the session
definition and the prior-data formats; it knows nothing of HTTP, storage or PostgreSQL."""
