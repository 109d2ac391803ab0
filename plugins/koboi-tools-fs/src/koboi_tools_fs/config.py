"""The ``tools_fs:`` config section. Only pydantic here, so loading the plugin stays cheap."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:
    from koboi.config import AgentConfig

#: The top-level key of the section in an agent's config.
SECTION = "tools_fs"

KIB = 1024
MIB = 1024 * KIB


class FsSettings(BaseModel):
    """Limits of the file tools; every field has a default, so the section is optional."""

    # An unknown key is an error, with a "did you mean" hint from the kernel.
    model_config = ConfigDict(extra="forbid")

    max_read_bytes: int = Field(
        default=256 * KIB,
        ge=4 * KIB,
        le=16 * MIB,
        description=(
            "Most bytes of file text one read_file call returns (one page); a longer file is "
            "read in several calls with offset."
        ),
    )
    max_write_bytes: int = Field(
        default=8 * MIB,
        ge=1,
        le=1024 * MIB,
        description=(
            "Largest file write_file, edit_file and apply_patch will write, and the largest "
            "file edit_file and apply_patch will read to change."
        ),
    )
    max_results: int = Field(
        default=500,
        ge=1,
        le=100_000,
        description="Most entries list_dir shows, paths glob returns and matches grep returns.",
    )


def settings_of(config: AgentConfig | None) -> FsSettings:
    """The agent's ``tools_fs`` section, or the defaults when it has none."""
    section = config.section(SECTION) if config is not None else None
    return section if isinstance(section, FsSettings) else FsSettings()
