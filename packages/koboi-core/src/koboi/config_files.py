"""Reading a config file: YAML with unique keys, ``extends``, ``.env`` files, its hash.

Errors name the file, the line and the column; nothing here validates sections
(that is :mod:`koboi.config_check`).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from koboi.errors import ConfigError, ConfigProblem
from koboi.interpolation import load_dotenv

# libyaml's parser when PyYAML was built with it (its wheels are): the pure-Python
# one took most of the time of reading a large config.
_SafeLoader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _UniqueKeyLoader(_SafeLoader):  # type: ignore[valid-type,misc]
    """A safe loader that refuses duplicate keys instead of keeping the last."""


def _construct_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode, deep: bool = False) -> Any:
    loader.flatten_mapping(node)
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None,
                None,
                f"duplicate key {key!r} (first on line {seen[key] + 1})",
                key_node.start_mark,
            )
        seen[key] = key_node.start_mark.line
    return loader.construct_mapping(node, deep=deep)


_UniqueKeyLoader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG,
    _construct_mapping,
)


def read_yaml(path: Path) -> dict[str, Any]:
    """Read one YAML mapping; errors name the file, line and column."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(
            [ConfigProblem("", "file not found", "check the path")], str(path)
        ) from None
    except IsADirectoryError:
        raise ConfigError(
            [ConfigProblem("", "is a directory, not a YAML file")], str(path)
        ) from None
    except UnicodeDecodeError:
        raise ConfigError([ConfigProblem("", "is not UTF-8 text")], str(path)) from None
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(
            [ConfigProblem("", f"invalid YAML: {where}{problem}")], str(path)
        ) from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(
            [
                ConfigProblem(
                    "", f"the top level must be a mapping of sections, not {type(data).__name__}"
                )
            ],
            str(path),
        )
    return data


def deep_merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """Merge ``override`` into ``base``: mappings recursively, everything else replaced."""
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def read_with_extends(path: Path, _chain: tuple[Path, ...] = ()) -> dict[str, Any]:
    """Read ``path`` and the files it ``extends`` (relative to it), merged base-first."""
    resolved = path.resolve()
    if resolved in _chain:
        cycle = " -> ".join(str(p) for p in (*_chain, resolved))
        raise ConfigError([ConfigProblem("extends", f"extends cycle: {cycle}")], str(_chain[0]))
    data = read_yaml(path)
    parents = data.pop("extends", None)
    if parents is None:
        return data
    if isinstance(parents, str):
        parents = [parents]
    if not isinstance(parents, list) or not all(isinstance(p, str) for p in parents):
        raise ConfigError(
            [ConfigProblem("extends", "must be a file path or a list of file paths")], str(path)
        )
    merged: dict[str, Any] = {}
    for parent in parents:
        merged = deep_merge(merged, read_with_extends(path.parent / parent, (*_chain, resolved)))
    return deep_merge(merged, data)


def load_env_files(base_dir: Path) -> None:
    """Load ``.env`` beside the config, then in the working directory; never override."""
    seen: set[Path] = set()
    for directory in (base_dir, Path.cwd()):
        candidate = (directory / ".env").resolve()
        if candidate not in seen:
            seen.add(candidate)
            load_dotenv(candidate, os.environ)


def config_hash(raw: Mapping[str, Any]) -> str:
    """A stable hash of the config as written (before interpolation)."""
    text = json.dumps(raw, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]
