"""The environment of a confined process: built from nothing, secrets and code injection kept out."""

from __future__ import annotations

import pytest

from koboi_confine.environment import clean_environment, is_forbidden


@pytest.mark.parametrize(
    "name",
    [
        # Names that say they hold a credential, wherever the word is.
        "OPENAI_API_KEY",
        "MY_APIKEY",
        "GITHUB_TOKEN",
        "DB_PASSWORD",
        "AWS_SECRET_ACCESS_KEY",
        "GPG_PASSPHRASE",
        "SERVICE_CREDENTIALS",
        "HTTP_AUTH",
        "session_cookie",
        # Variables that make a program run or load something else.
        "LD_PRELOAD",
        "DYLD_INSERT_LIBRARIES",
        "BASH_ENV",
        "ENV",
        "BASH_FUNC_ls%%",
        "PYTHONPATH",
        "PERL5OPT",
        "NODE_OPTIONS",
        "GIT_SSH_COMMAND",
        "GIT_CONFIG_GLOBAL",
        "PROMPT_COMMAND",
        "SSL_CERT_FILE",
        # Whole families whose values are keys or addresses of services.
        "KOBOI_STORE",
        "ANTHROPIC_BASE_URL",
        "PGHOST",
        "DATABASE_URL",
        "SSH_AUTH_SOCK",
        "GH_HOST",
    ],
)
def test_forbidden_names(name: str) -> None:
    assert is_forbidden(name)


@pytest.mark.parametrize(
    "name", ["PATH", "HOME", "LANG", "LC_ALL", "TERM", "TZ", "AUTHOR", "GIT_AUTHOR_NAME", "USER"]
)
def test_ordinary_names_pass(name: str) -> None:
    assert not is_forbidden(name)


def test_the_environment_is_built_from_nothing() -> None:
    env = clean_environment(
        inherited={"LANG": "C.UTF-8", "OPENAI_API_KEY": "sk-x", "EDITOR": "vi"},
        pass_names=["LANG", "OPENAI_API_KEY", "TERM"],
        fixed={"TZ": "UTC"},
        requested={"MODE": "test"},
        path=["/usr/bin", "/bin"],
        home="/w/s1",
    )
    assert env == {
        "PATH": "/usr/bin:/bin",
        "HOME": "/w/s1",
        "PWD": "/w/s1",
        "TMPDIR": "/w/s1",
        "LANG": "C.UTF-8",  # passed by name and set
        "TZ": "UTC",
        "MODE": "test",
    }


def test_fixed_and_requested_cannot_move_path_home_or_tmpdir_nor_add_forbidden_names() -> None:
    env = clean_environment(
        inherited={},
        pass_names=[],
        fixed={"HOME": "/", "LD_PRELOAD": "/tmp/evil.so"},
        requested={"PATH": "/tmp", "TMPDIR": "/tmp", "GITHUB_TOKEN": "t", "PWD": "/w/s1/sub"},
        path=["/usr/bin"],
        home="/w/s1",
    )
    assert env == {"PATH": "/usr/bin", "HOME": "/w/s1", "PWD": "/w/s1/sub", "TMPDIR": "/w/s1"}


def test_requested_overrides_fixed() -> None:
    env = clean_environment(
        inherited={},
        pass_names=[],
        fixed={"LANG": "C"},
        requested={"LANG": "C.UTF-8"},
        path=[],
        home="/w",
    )
    assert env["LANG"] == "C.UTF-8"
    assert (
        clean_environment(
            inherited={}, pass_names=[], fixed={"LANG": "C"}, requested=None, path=[], home="/w"
        )["LANG"]
        == "C"
    )


@pytest.mark.parametrize(
    "value",
    [
        "sk-proj-" + "a1B2c3D4" * 4,
        "ghp_" + "a1B2" * 9,
        "postgresql://app:S3cr3t-pw@db.internal:5432/app",
        "Bearer abcd1234efgh5678",
    ],
)
def test_a_secret_value_of_koboi_s_environment_never_passes(value: str) -> None:
    env = clean_environment(
        inherited={"DEPLOY_TARGET": value, "LANG": "C.UTF-8"},
        pass_names=["DEPLOY_TARGET", "LANG"],
        fixed={},
        requested=None,
        path=[],
        home="/w",
    )
    assert "DEPLOY_TARGET" not in env
    assert env["LANG"] == "C.UTF-8"  # control: an ordinary value passes
