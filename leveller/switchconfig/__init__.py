"""Switch configuration rendered from the level -> DSCP -> queue map of `leveller.core.qos`.

PURE (data in, text/data out): one module per vendor, all fed by the same `LevelMap`
the SDN app and the agents use, so switch queues and host DSCP marks cannot disagree.
Traffic class = level: DSCP of level L -> traffic class L -> the level's queue; every
DSCP value no level uses (unmarked traffic included) -> traffic class 0, the lowest.
"""

from __future__ import annotations

import re

from leveller.model.errors import UserError


def check_port_name(name: str, pattern: re.Pattern[str], rule: str) -> str:
    """`name` if it fully matches the vendor's `pattern`, else UserError naming --ports and `rule`."""
    if not pattern.fullmatch(name):
        raise UserError(f"--ports {name!r}: {rule}")
    return name
