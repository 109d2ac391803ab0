"""The crash demo's tool: ``append_log``, a non-idempotent, fsynced file append."""
