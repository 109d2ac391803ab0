"""git tools for koboi: ``git_status``, ``git_diff``, ``git_log`` and ``git_commit``."""
