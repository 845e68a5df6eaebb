"""The base of every boundary model: strict types, unknown keys refused, immutable."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class StrictModel(BaseModel):
    """A document section as an operator writes it.

    Strict: "8" is not 8 and 1.5 is not a count; an unknown key is an error (a typo such as
    `concurency:` must not be ignored); frozen, so a checked value stays checked.
    """

    model_config = ConfigDict(
        strict=True,
        extra="forbid",
        frozen=True,
        allow_inf_nan=False,
        validate_default=False,
        use_attribute_docstrings=True,
    )
