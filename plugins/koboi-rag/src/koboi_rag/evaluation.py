"""Retrieval quality: test collections in the classic SMART/Glasgow format, nDCG and recall.

A collection is three files: documents (``.I`` id, then fields ``.T`` title, ``.A``
authors, ``.B`` bibliographic note, ``.W`` text, ``.X`` cross-references…),
queries (the same records), and relevance judgements, one ``query document
[grade…]`` per line. Cranfield numbers its judgements' queries 1..225 in the
order of the query file (its ``.I`` ids skip numbers), so queries are numbered by
their order in the file; its grades are codes 1 (complete answer) to 4 (minimum
interest), a gain of ``5 - code``; other codes (``-1``) and collections without
grades give a gain of 1 for every judged pair (codes outside 1..4 in a graded
collection: none).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

_FIELD = re.compile(r"^\.([A-Z])\s*(.*)$")


@dataclass
class Record:
    id: str
    fields: dict[str, str] = field(default_factory=dict)

    def text(self) -> str:
        """Title and text: the title once (Cranfield's text repeats its title)."""
        title = " ".join(self.fields.get("T", "").split())
        body = self.fields.get("W", "").strip()
        if title and not " ".join(body.split()).startswith(title):
            return f"{self.fields.get('T', '').strip()}\n\n{body}".strip()
        return body


@dataclass
class Collection:
    name: str
    documents: list[Record]
    queries: list[Record]
    #: query number (1-based, file order) -> document id -> gain
    judgements: dict[int, dict[str, float]]


def parse_records(text: str) -> list[Record]:
    records: list[Record] = []
    current: Record | None = None
    name = ""
    for line in text.splitlines():
        match = _FIELD.match(line)
        if match and match.group(1) == "I":
            current = Record(match.group(2).strip())
            records.append(current)
            name = ""
            continue
        if match and current is not None and len(line.split()) <= 2 and line[1:2].isupper():
            name = match.group(1)
            current.fields.setdefault(name, "")
            rest = match.group(2)
            if rest:
                current.fields[name] += rest + "\n"
            continue
        if current is not None and name:
            current.fields[name] += line + "\n"
    return records


def parse_judgements(text: str, *, graded: bool) -> dict[int, dict[str, float]]:
    judged: dict[int, dict[str, float]] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 2 or not parts[0].isdigit():
            continue
        query, document = int(parts[0]), parts[1]
        gain = 1.0
        if graded and len(parts) >= 3:
            try:
                code = int(parts[2])
            except ValueError:
                code = 0
            if not 1 <= code <= 4:
                continue
            gain = 5.0 - code
        judged.setdefault(query, {})[document] = gain
    return judged


def load_collection(directory: Path, name: str | None = None) -> Collection:
    """A collection from a directory: Cranfield's files (``cran.all.1400``, ``cran.qry``,
    ``cranqrel``, graded) or any ``*.ALL`` / ``*.QRY`` / ``*.REL`` trio (CISI, CACM,
    MED…, binary)."""
    files = {p.name.lower(): p for p in directory.iterdir() if p.is_file()}

    def find(*suffixes: str) -> Path:
        for lower, path in sorted(files.items()):
            if any(lower.endswith(s) for s in suffixes):
                return path
        raise FileNotFoundError(
            f"{directory}: no file ending in {' or '.join(suffixes)} (expected a SMART-format "
            "collection: documents .ALL, queries .QRY, judgements .REL)"
        )

    documents = find(".all", ".all.1400")
    queries = find(".qry")
    judgements = find("qrel", ".rel")
    graded = judgements.name.lower().startswith("cranqrel")
    return Collection(
        name=name or directory.name,
        documents=parse_records(documents.read_text(errors="replace")),
        queries=parse_records(queries.read_text(errors="replace")),
        judgements=parse_judgements(judgements.read_text(errors="replace"), graded=graded),
    )


def ndcg_at(ranked: Sequence[str], gains: Mapping[str, float], k: int = 10) -> float:
    """nDCG@k with gains as given (log2 discount, ideal = gains sorted)."""
    dcg = sum(gains.get(doc, 0.0) / math.log2(rank + 2) for rank, doc in enumerate(ranked[:k]))
    ideal = sorted(gains.values(), reverse=True)[:k]
    best = sum(g / math.log2(rank + 2) for rank, g in enumerate(ideal))
    return dcg / best if best > 0 else 0.0


def recall_at(ranked: Sequence[str], gains: Mapping[str, float], k: int = 100) -> float:
    relevant = {d for d, g in gains.items() if g > 0}
    if not relevant:
        return 0.0
    return len(relevant & set(ranked[:k])) / len(relevant)


def evaluate(
    runs: Mapping[int, Sequence[str]], judgements: Mapping[int, Mapping[str, float]]
) -> dict[str, float]:
    """Mean nDCG@10 and recall@100 over the judged queries (a query without a run
    scores 0)."""
    judged = [q for q, gains in judgements.items() if any(g > 0 for g in gains.values())]
    if not judged:
        return {"ndcg@10": 0.0, "recall@100": 0.0, "queries": 0}
    ndcg = sum(ndcg_at(runs.get(q, ()), judgements[q]) for q in judged) / len(judged)
    recall = sum(recall_at(runs.get(q, ()), judgements[q]) for q in judged) / len(judged)
    return {"ndcg@10": ndcg, "recall@100": recall, "queries": len(judged)}
