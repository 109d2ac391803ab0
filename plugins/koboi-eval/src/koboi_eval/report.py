"""Reports of ``koboi eval-test``: a table with explanations, JSON, and JUnit XML.

With ``deterministic=True`` (``--mock``) a report holds nothing that changes
from one run to the next — no timings, no ids, no temporary paths (the runner
already replaced those) — so two runs give byte-identical reports.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Sequence
from typing import Any

from koboi_eval.runner import CaseResult

FORMAT_VERSION = 1
STATUSES = ("passed", "failed", "skipped", "error")
_MARKS = {"passed": "ok  ", "failed": "FAIL", "skipped": "skip"}


def summary(results: Sequence[CaseResult]) -> dict[str, int]:
    counts: Counter[str] = Counter(r.status for r in results)
    found = {status: counts.get(status, 0) for status in STATUSES}
    found["cases"] = len(results)
    found["checks_skipped"] = sum(r.checks_skipped for r in results)
    return found


def summary_line(results: Sequence[CaseResult]) -> str:
    counts = summary(results)
    errors = counts["error"]
    text = (
        f"{counts['cases']} case(s): {counts['passed']} passed, {counts['failed']} failed, "
        f"{counts['skipped']} skipped, {errors} error{'' if errors == 1 else 's'}"
    )
    if counts["checks_skipped"]:
        text += f"; {counts['checks_skipped']} check(s) skipped"
    return text


def ok(results: Sequence[CaseResult]) -> bool:
    """True when nothing failed and nothing was in error (skips do not fail a run)."""
    return not any(r.status in ("failed", "error") for r in results)


def _checks_column(result: CaseResult) -> str:
    if result.status in ("error", "skipped") and not result.checks:
        return result.reason.splitlines()[0] if result.reason else ""
    counts = Counter(c.status for c in result.checks)
    text = f"{counts.get('passed', 0)}/{len(result.checks)} passed"
    if counts.get("failed"):
        text += f", {counts['failed']} failed"
    if counts.get("skipped"):
        text += f", {counts['skipped']} skipped"
    if result.reason:
        text += f" ({result.reason.splitlines()[0]})"
    return text


def _indent(text: str, prefix: str) -> str:
    return "\n".join(prefix + line if line else line for line in text.splitlines())


def explain(result: CaseResult, indent: str = "  ") -> list[str]:
    """Why a case failed: its reason, then each check — what was expected, what happened."""
    lines = [_indent(result.reason, indent)] if result.reason else []
    for check in result.checks:
        lines.append(f"{indent}{_MARKS[check.status]} {check.label}")
        lines += [_indent(e, indent + "     ") for e in check.explanation()]
    return lines


def render_table(results: Sequence[CaseResult], *, deterministic: bool) -> str:
    """The text report: one row per case, then why each failure failed, then the totals."""
    header = ["STATUS", "CASE", "CHECKS"] + ([] if deterministic else ["TIME"])
    rows = [
        [r.status, r.case_id, _checks_column(r)]
        + ([] if deterministic else [f"{r.duration_s:.2f}s"])
        for r in results
    ]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header) - 1)]

    def line(cells: list[str]) -> str:
        padded = [cell.ljust(widths[i]) for i, cell in enumerate(cells[:-1])]
        return "  ".join([*padded, cells[-1]]).rstrip()

    out = [line(header), *(line(row) for row in rows)]
    details = [r for r in results if r.status in ("failed", "error")]
    for result in details:
        out += ["", f"{result.status.upper()} {result.case_id}", *explain(result)]
    skipped_checks = [
        (r, c) for r in results if r.status != "failed" for c in r.checks if c.status == "skipped"
    ]
    if skipped_checks:
        out += ["", "SKIPPED CHECKS (not counted as passed)"]
        out += [f"  {r.case_id}: {c.label}: {c.reason}" for r, c in skipped_checks]
    skipped_cases = [r for r in results if r.status == "skipped" and r.reason]
    if skipped_cases:
        out += ["", "SKIPPED CASES"]
        out += [f"  {r.case_id}: {r.reason}" for r in skipped_cases]
    out += ["", summary_line(results)]
    return "\n".join(out) + "\n"


def result_data(result: CaseResult, *, deterministic: bool) -> dict[str, Any]:
    data: dict[str, Any] = {
        "id": result.case_id,
        "file": result.file,
        "name": result.name,
        "status": result.status,
        "reason": result.reason,
        "outcome": result.outcome,
        "output": result.output,
        "model_calls": result.model_calls,
        "cost_usd": result.cost_usd,
        "tags": list(result.tags),
        "checks": [
            {
                "check": c.label,
                "status": c.status,
                "expected": c.expected,
                "actual": c.actual,
                "reason": c.reason,
            }
            for c in result.checks
        ],
    }
    if not deterministic:
        data["duration_s"] = round(result.duration_s, 4)
    return data


def render_json(results: Sequence[CaseResult], *, deterministic: bool) -> str:
    document = {
        "format": FORMAT_VERSION,
        "mock": deterministic,
        "summary": summary(results),
        "cases": [result_data(r, deterministic=deterministic) for r in results],
    }
    return json.dumps(document, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def render_junit(results: Sequence[CaseResult], *, deterministic: bool) -> bytes:
    """JUnit XML (one testsuite per eval file), as CI systems read it."""
    counts = summary(results)
    root = ET.Element(
        "testsuites",
        name="koboi eval-test",
        tests=str(counts["cases"]),
        failures=str(counts["failed"]),
        errors=str(counts["error"]),
        skipped=str(counts["skipped"]),
    )
    by_file: dict[str, list[CaseResult]] = {}
    for result in results:
        by_file.setdefault(result.file, []).append(result)
    for file, members in by_file.items():
        inner = summary(members)
        suite = ET.SubElement(
            root,
            "testsuite",
            name=file,
            tests=str(inner["cases"]),
            failures=str(inner["failed"]),
            errors=str(inner["error"]),
            skipped=str(inner["skipped"]),
        )
        for result in members:
            attributes = {"classname": file, "name": result.name}
            if not deterministic:
                attributes["time"] = f"{result.duration_s:.3f}"
            testcase = ET.SubElement(suite, "testcase", attributes)
            skipped_checks = [c for c in result.checks if c.status == "skipped"]
            if skipped_checks:
                properties = ET.SubElement(testcase, "properties")
                for check in skipped_checks:
                    ET.SubElement(
                        properties,
                        "property",
                        name="skipped_check",
                        value=f"{check.label}: {check.reason}",
                    )
            if result.status == "failed":
                first = next((c for c in result.checks if c.status == "failed"), None)
                message = first.label if first is not None else result.reason
                ET.SubElement(testcase, "failure", message=message).text = "\n".join(
                    explain(result, indent="")
                )
            elif result.status == "error":
                ET.SubElement(
                    testcase,
                    "error",
                    message=result.reason.splitlines()[0] if result.reason else "",
                ).text = result.reason
            elif result.status == "skipped":
                ET.SubElement(testcase, "skipped", message=result.reason)
    ET.indent(root)
    return bytes(ET.tostring(root, encoding="utf-8", xml_declaration=True)) + b"\n"
