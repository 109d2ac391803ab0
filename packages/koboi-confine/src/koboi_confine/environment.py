"""The environment a sandboxed process sees: nothing secret, nothing that injects code.

A variable is kept out when its name is a secret name by the kernel's one rule
(:func:`koboi.secrets.is_secret_name`), and also — more cautious than what a
secret is, since a process never needs these — when its name merely contains a
credential word (``MONKEYKEY``, ``X_SESSION``, ``..._CERT``), changes what a
program runs or loads, or belongs to a provider's or a service's family. A variable
of koboi's own environment is kept out too when its value is a secret by the
kernel's rule (:func:`koboi.secrets.find_secrets`: a provider key, a token, a
password in a URL...), whatever its name.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from koboi.secrets import find_secrets, is_secret_name

# Credential words anywhere in a name: wider than a secret name, harmless to drop.
_CREDENTIAL_WORDS = re.compile(
    r"KEY|TOKEN|SECRET|PASSW|PASSPHRASE|CREDENTIAL|AUTH(?!OR)|COOKIE|SESSION|PRIVATE|CERT",
    re.IGNORECASE,
)
# Variables that change what a program runs or loads: a tool must not be able to
# inherit (or be handed) a way to run code it did not ask for.
_CODE_INJECTION = re.compile(
    r"^(LD_|DYLD_|BASH_ENV$|ENV$|BASH_FUNC_|PYTHON|PERL5|PERLLIB|RUBYOPT|RUBYLIB|NODE_OPTIONS$"
    r"|NODE_PATH$|JAVA_TOOL_OPTIONS$|_JAVA_OPTIONS$|GIT_SSH|GIT_EXEC_PATH$|GIT_CONFIG|PS4$"
    r"|PROMPT_COMMAND$|IFS$|SHELLOPTS$|BASHOPTS$|GCONV_PATH$|LOCPATH$|MALLOC_|HOSTALIASES$"
    r"|RESOLV_|LOCALDOMAIN$|SSL_CERT|CURL_CA|REQUESTS_CA)",
    re.IGNORECASE,
)
# Whole families that belong to a provider or a service (their values are keys),
# and koboi's store URL (KOBOI_STORE=postgresql://user:password@...).
_FAMILIES = re.compile(
    r"^(KOBOI_STORE$|OPENAI_|ANTHROPIC_|CLOUDFLARE_|AZURE_|AWS_|GOOGLE_|GCP_|GEMINI_|MISTRAL_"
    r"|COHERE_|GROQ_|HF_|HUGGING|OPENROUTER_|TOGETHER_|DEEPSEEK_|XAI_|VOYAGE_|PG|MYSQL_"
    r"|REDIS_|DATABASE_URL$|DOCKER_|KUBE|VAULT_|SSH_|GPG_|NPM_|PYPI_|TWINE_|GH_|GITHUB_|GITLAB_)",
    re.IGNORECASE,
)


def is_forbidden(name: str) -> bool:
    """True when a variable named ``name`` may never reach a sandboxed process."""
    return bool(
        is_secret_name(name)
        or _CREDENTIAL_WORDS.search(name)
        or _CODE_INJECTION.match(name)
        or _FAMILIES.match(name)
    )


def clean_environment(
    *,
    inherited: Mapping[str, str],
    pass_names: Iterable[str],
    fixed: Mapping[str, str],
    requested: Mapping[str, str] | None,
    path: Iterable[str],
    home: str,
) -> dict[str, str]:
    """The environment of one sandboxed process.

    Built up from nothing: ``PATH`` (the allow-list), ``HOME`` (the session's
    workdir), the ``pass_names`` that are set in ``inherited``, not forbidden
    and whose value is no secret, the config's ``fixed`` variables, then what
    the tool asked for (``requested``, forbidden names dropped). Nothing else of
    koboi's own environment gets through.
    """
    # TMPDIR inside the workdir: under Landlock /tmp is out of reach, and shared
    # between sessions anyway.
    env = {"PATH": ":".join(path), "HOME": home, "PWD": home, "TMPDIR": home}
    for name in pass_names:
        value = inherited.get(name)
        if value is not None and not is_forbidden(name) and not find_secrets(value):
            env[name] = value
    for source in (fixed, requested or {}):
        for name, value in source.items():
            if name in ("PATH", "HOME", "TMPDIR") or is_forbidden(name):
                continue
            env[name] = value
    return env
