"""Options several commands share (parsed here once, with errors that name the option)."""

from __future__ import annotations

from leveller.errors import UserError
from leveller.jobs.logline import check_job_name


def parse_weights(items: list[str], option: str = "--job-weight") -> dict[str, float]:
    """``JOB=W`` items into job -> weight, checked with the controller's own rule (leveller.rpc.schema)."""
    from leveller.rpc.codec import SchemaError
    from leveller.rpc.schema import MAX_WEIGHT, MIN_WEIGHT, check_weight

    out: dict[str, float] = {}
    for item in items:
        job, _, value = item.partition("=")
        try:
            weight = check_weight(float(value), option)
        except (ValueError, SchemaError):
            raise UserError(f"{option} {item!r}: expected JOB=W with a weight W in [{MIN_WEIGHT:g}, {MAX_WEIGHT:g}] "
                            f"(1 = the paper's ranking, e.g. {option} big=4)") from None
        try:
            name = check_job_name(job)
        except UserError as exc:
            raise UserError(f"{option} {item!r}: {exc}") from None
        if name in out:
            raise UserError(f"{option} {item!r}: job {name!r} has a weight already ({out[name]:g})")
        out[name] = weight
    return out
