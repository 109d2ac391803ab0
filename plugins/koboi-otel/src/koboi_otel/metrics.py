"""The metrics of runs: the GenAI conventions' token usage and operation duration, and
koboi's runs by outcome, cost, tool calls by verdict and in-doubt calls after resume.

Labels are names and outcomes only (agent, model, provider, tool, verdict, stage,
outcome): never an argument, a message or an error text, so nothing a run handles
can reach a label.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from koboi_otel import semconv as A

if TYPE_CHECKING:
    from opentelemetry.metrics import Counter, Histogram

    from koboi_otel.exporting import Pipeline

_BY_PIPELINE: dict[int, Instruments] = {}


@dataclass
class Instruments:
    token_usage: Histogram
    operation_duration: Histogram
    runs: Counter
    run_duration: Histogram
    cost: Counter
    tool_calls: Counter
    in_doubt_calls: Counter

    @classmethod
    def of(cls, pipeline: Pipeline) -> Instruments:
        """The instruments of ``pipeline``'s meter (made once per pipeline)."""
        found = _BY_PIPELINE.get(id(pipeline))
        if found is None:
            found = _BY_PIPELINE[id(pipeline)] = cls._make(pipeline)
        return found

    @classmethod
    def _make(cls, pipeline: Pipeline) -> Instruments:
        from koboi_otel._version import __version__

        meter = pipeline.meter_provider.get_meter("koboi", __version__)
        return cls(
            token_usage=meter.create_histogram(
                "gen_ai.client.token.usage",
                unit="{token}",
                description="Tokens used by model calls (the loop's and side calls).",
            ),
            operation_duration=meter.create_histogram(
                "gen_ai.client.operation.duration",
                unit="s",
                description="Duration of model calls.",
            ),
            runs=meter.create_counter(
                "koboi.runs", unit="{run}", description="Runs that ended, by outcome."
            ),
            run_duration=meter.create_histogram(
                "koboi.run.duration", unit="s", description="Duration of runs, by outcome."
            ),
            cost=meter.create_counter(
                "koboi.cost", unit="USD", description="Cost of model calls at configured prices."
            ),
            tool_calls=meter.create_counter(
                "koboi.tool.calls",
                unit="{call}",
                description="Tool calls, by tool, verdict (allow, deny) and outcome.",
            ),
            in_doubt_calls=meter.create_counter(
                "koboi.tool.in_doubt",
                unit="{call}",
                description="Calls found started and unfinished when a run resumed (outcome "
                "unknown), by tool and the policy applied.",
            ),
        )

    def model_call(
        self,
        traced: Any,
        model: str,
        input_tokens: int,
        output_tokens: int,
        seconds: float,
        cost: float | None,
        *,
        error: str | None,
        purpose: str | None = None,
    ) -> None:
        labels: dict[str, str] = {
            A.OPERATION: "chat",
            A.PROVIDER: traced.provider or "koboi",
            A.REQUEST_MODEL: traced.model,
            A.RESPONSE_MODEL: model,
            A.AGENT_NAME: traced.agent,
        }
        if purpose is not None:
            labels[A.SIDE_CALL_PURPOSE] = purpose
        timed = {**labels, A.ERROR_TYPE: error} if error else labels
        self.operation_duration.record(seconds, timed)
        if error:
            return
        self.token_usage.record(input_tokens, {**labels, A.TOKEN_TYPE: "input"})
        self.token_usage.record(output_tokens, {**labels, A.TOKEN_TYPE: "output"})
        if cost:
            self.cost.add(cost, labels)

    def tool_call(
        self,
        traced: Any,
        tool: str,
        verdict: str,
        outcome: str,
        seconds: float,
        *,
        stage: str | None = None,
    ) -> None:
        labels = {
            A.TOOL_NAME: tool,
            A.TOOL_VERDICT: verdict,
            A.TOOL_OUTCOME: outcome,
            A.AGENT_NAME: traced.agent,
        }
        if stage is not None:
            labels[A.TOOL_REFUSED_BY] = stage
        self.tool_calls.add(1, labels)

    def run(self, traced: Any, outcome: str, seconds: float) -> None:
        labels = {A.AGENT_NAME: traced.agent, A.RUN_OUTCOME: outcome}
        self.runs.add(1, labels)
        self.run_duration.record(seconds, labels)

    def in_doubt(self, traced: Any, tool: str, policy: str) -> None:
        self.in_doubt_calls.add(
            1, {A.TOOL_NAME: tool, A.TOOL_POLICY: policy, A.AGENT_NAME: traced.agent}
        )
