"""koboi's restricted sandbox, with hard isolation (seccomp, Landlock) on Linux."""
