"""Analysers: text to index terms (lower case, words, stop words out, stems).

- ``en``: the Lucene English stop words (bm25s's list) and the Snowball English
  stemmer (PyStemmer, a C extension).
- ``id``: Sastrawi's Indonesian stop words and stemmer (PySastrawi, MIT), the
  stemmer cached per word (it is pure Python and slow per call; a vocabulary is
  small).
- ``none``: words only.

``rag.stopwords`` and ``rag.stemmer`` override the language's choice each
(``false``, ``en``, ``id``, or a list of stop words). The same analyser serves
indexing and queries, so a term is always compared in one form.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from functools import lru_cache
from typing import Any

_WORD = re.compile(r"[^\W_]+", re.UNICODE)


@lru_cache(maxsize=4)
def _stopwords(language: str) -> frozenset[str]:
    if language == "en":
        from bm25s.stopwords import STOPWORDS_EN  # type: ignore[import-untyped]

        return frozenset(STOPWORDS_EN)
    if language == "id":
        from Sastrawi.StopWordRemover.StopWordRemoverFactory import (  # type: ignore[import-untyped]
            StopWordRemoverFactory,
        )

        return frozenset(StopWordRemoverFactory().get_stop_words())
    return frozenset()


def _stemmer(language: str) -> Callable[[str], str] | None:
    if language == "en":
        import Stemmer  # type: ignore[import-not-found]

        snowball = Stemmer.Stemmer("english")
        snowball.maxCacheSize = 100_000
        stem_word: Callable[[str], str] = snowball.stemWord
        return stem_word
    if language == "id":
        from Sastrawi.Stemmer.StemmerFactory import StemmerFactory  # type: ignore[import-untyped]

        sastrawi = StemmerFactory().create_stemmer()
        cached: Callable[[str], str] = lru_cache(maxsize=200_000)(sastrawi.stem)
        return cached
    return None


class Analyzer:
    """Text -> terms. ``describe()`` names it (kept in the index: terms made by one
    analyser are never compared with another's)."""

    def __init__(
        self,
        language: str = "en",
        *,
        stopwords: bool | str | Sequence[str] | None = None,
        stemmer: bool | str | None = None,
        synonyms: dict[str, list[str]] | None = None,
    ) -> None:
        if stopwords is None or stopwords is True:
            stop_language: str | None = language
            self.stopwords = _stopwords(language)
        elif stopwords is False:
            stop_language, self.stopwords = "none", frozenset()
        elif isinstance(stopwords, str):
            stop_language, self.stopwords = stopwords, _stopwords(stopwords)
        else:
            stop_language, self.stopwords = "custom", frozenset(w.lower() for w in stopwords)
        stem_language = language if stemmer is None or stemmer is True else (stemmer or "none")
        self._stem = _stemmer(str(stem_language))
        self.language = language
        self._name = f"{language}/stop={stop_language}/stem={stem_language}"
        self.synonyms = {
            self._one(k): [t for v in vs for t in self.terms(v)]
            for k, vs in (synonyms or {}).items()
        }

    def describe(self) -> str:
        return self._name

    def _one(self, word: str) -> str:
        word = word.lower()
        return self._stem(word) if self._stem is not None else word

    def terms(self, text: str) -> list[str]:
        """The index terms of ``text``, in order (repeats kept: they count)."""
        stop = self.stopwords
        stem = self._stem
        words = [w for w in _WORD.findall(text.lower()) if w not in stop]
        if stem is None:
            return words
        return [stem(w) for w in words]

    def query_terms(self, text: str) -> list[str]:
        """:meth:`terms`, plus each term's synonyms (``rag.synonyms``)."""
        terms = self.terms(text)
        if not self.synonyms:
            return terms
        extra = [s for t in terms for s in self.synonyms.get(t, ())]
        return terms + extra


def analyzer_for(settings: Any) -> Analyzer:
    """The analyser a :class:`~koboi_rag.config.RagSettings` asks for."""
    return Analyzer(
        settings.language,
        stopwords=settings.stopwords,
        stemmer=settings.stemmer,
        synonyms=settings.synonyms,
    )


def words(text: str) -> Iterable[str]:
    """Words of ``text`` (no analysis): what token-counting chunkers count."""
    return _WORD.findall(text)
