"""Basic koboi tools: ``calculator`` (safe arithmetic) and ``current_time``."""
