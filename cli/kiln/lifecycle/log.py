"""The lifecycle log: one JSON object per line, appended, never rewritten.

    {"v": 1, "node": "gpu0001", "at": 1764583331.0, "to": "quarantined",
     "evidence": "run 20261130T100000Z-3f9a1c: new node"}

(`identity_change`, `inferred` and `reason`, a failure's check, appear only when set.) A line
of a newer schema is refused whole (a newer kiln wrote it: this one could lose what it says);
a line cut short is an append a killed kiln did not finish, and is left out.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from kiln.errors import EnvironmentProblem, InvalidInputError
from kiln.lifecycle.machine import Event
from kiln.lifecycle.states import State

SCHEMA = 1


class NewerLog(EnvironmentProblem):
    """The log holds lines of a schema this kiln does not know (exit 3)."""


def to_line(event: Event) -> str:
    doc: dict = {"v": SCHEMA, "node": event.node, "at": event.at, "to": str(event.to)}
    if event.evidence:
        doc["evidence"] = event.evidence
    if event.identity_change:
        doc["identity_change"] = True
    if event.inferred:
        doc["inferred"] = True
    if event.reason:
        doc["reason"] = event.reason
    return json.dumps(doc, separators=(",", ":"))


def to_text(events: Iterable[Event]) -> str:
    return "".join(to_line(event) + "\n" for event in events)


_STATES = {str(state): state for state in State}


def _event(doc: dict) -> Event:
    return Event(
        str(doc["node"]),
        float(doc["at"]),
        _STATES[doc["to"]],
        str(doc.get("evidence", "")),
        bool(doc.get("identity_change")),
        bool(doc.get("inferred")),
        str(doc.get("reason", "")),
    )


def _whole(lines: list[str]) -> list[dict] | None:
    """Every line decoded in one go (a log of whole objects: the common case), else None."""
    try:
        docs = json.loads("[" + ",".join(line for line in lines if line.strip()) + "]")
    except ValueError:
        return None
    return docs if all(isinstance(doc, dict) for doc in docs) else None


def read_lines(lines: list[str], where: str) -> list[Event]:
    """The events of a log's lines; InvalidInputError (exit 2) naming the line that is not an
    event, NewerLog naming the first line of a newer schema."""
    docs = _whole(lines)
    if docs is not None and all(doc.get("v") == SCHEMA for doc in docs):
        try:
            return [_event(doc) for doc in docs]
        except (ValueError, KeyError, TypeError):
            pass  # the line by line reading below names the line
    events: list[Event] = []
    for number, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            doc = json.loads(line)
            version = doc.get("v")
            if isinstance(version, int) and version > SCHEMA:
                raise NewerLog(
                    f"{where}:{number + 1} was written by a newer kiln (lifecycle schema "
                    f"{version}; this kiln reads {SCHEMA})",
                    hint="use the kiln that wrote it (nothing was changed)",
                )
            events.append(_event(doc))
        except (ValueError, KeyError, TypeError, AttributeError) as error:
            if not line.rstrip().endswith("}"):
                continue  # an append cut short by a killed kiln (ended by the next append)
            raise InvalidInputError(
                f"{where}:{number + 1} is not a lifecycle event ({error})",
                hint="mend or remove that line (kiln only appends to this log)",
            ) from None
    return events
