"""The ``openai-compat`` config section."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:
    from koboi.config import AgentConfig

SECTION = "openai-compat"


class OpenAICompatSettings(BaseModel):
    """What ``koboi serve`` offers OpenAI clients (the section is optional)."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = Field(
        default=True,
        description="Serve GET /v1/models and POST /v1/chat/completions (false: not served).",
    )
    model: str | None = Field(
        default=None,
        min_length=1,
        max_length=200,
        description="The model id clients name in 'model' (and /v1/models lists); default: "
        "the agent's name. Any other model is 404 model_not_found.",
    )
    approvals: Literal["deny", "wait"] = Field(
        default="deny",
        description="A tool call that needs approval during a completion: 'deny' refuses it at "
        "once (an OpenAI client cannot approve; the model is told, and the answer says so); "
        "'wait' lets it wait for POST /v1/approvals/{id} until its deadline (someone "
        "approves with the koboi API or console meanwhile).",
    )


def settings_of(config: AgentConfig) -> OpenAICompatSettings:
    section = config.section(SECTION)
    return section if isinstance(section, OpenAICompatSettings) else OpenAICompatSettings()
