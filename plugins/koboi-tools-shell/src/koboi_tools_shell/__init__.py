"""koboi shell tools: ``run_shell`` (foreground or background), ``shell_status``, ``shell_kill``.

Every command runs through the session's sandbox (``ctx.run_process``); see the
README for what each backend confines.
"""
