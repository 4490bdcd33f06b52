"""A node's hardware identity, and whether it changed since kiln last saw the node (issue 33).

The slurm_node role keeps what it last saw in /var/lib/kiln/slurm-joined, one line of
`key=value` words: the shape Ansible reports (cpus, memory_gib, gpus, model) and the identity
the node reader (playbooks/roles/slurm_node/files/kiln-node-identity) prints now:

    board=<product serial>/<board serial>   gpu_serials=<serial>,...   hca_guids=<dev>:<guid>,...

A node with no such line is new; a node where a word both lines hold differs (a replaced GPU,
HCA or board under the same name, a server swapped whole) has changed. Either is quarantined:
drained until a burn-in passes on it. A word only one line holds is no change: a line an older
kiln wrote, without the identity, is taken as it is and completed (never a mass quarantine on
upgrade). The drift probe reads the same two lines, so a converged re-apply that would skip the
slurm stage runs it on a node whose identity changed. Pure: text in, text out.
"""

from __future__ import annotations

IDENTITY_KEYS = ("board", "gpu_serials", "hca_guids")
NEW_NODE = "new node"


def marker_words(line: str | None) -> dict[str, str]:
    """`key=value` words of a marker line (other words ignored)."""
    words: dict[str, str] = {}
    for word in (line or "").split():
        key, sep, value = word.partition("=")
        if sep:
            words[key] = value
    return words


def identity_change(seen: str | None, now: str) -> str:
    """ "" when nothing both lines hold differs; "new node" when kiln saw nothing; else
    "hardware changed: KEY, ..." naming what differs (the quarantine drain's why)."""
    if not (seen or "").strip():
        return NEW_NODE
    before, after = marker_words(seen), marker_words(now)
    changed = [key for key in after if key in before and before[key] != after[key]]
    return f"hardware changed: {', '.join(changed)}" if changed else ""


def identity_only(line: str | None) -> str:
    """The identity words of a marker line, in IDENTITY_KEYS order (what the probe compares)."""
    words = marker_words(line)
    return " ".join(f"{key}={words[key]}" for key in IDENTITY_KEYS if key in words)


def identity_words(line: str | None) -> dict[str, str]:
    """The identity of a reader's line as a mapping (the preflight facts' `identity`)."""
    words = marker_words(line)
    return {key: words[key] for key in IDENTITY_KEYS if key in words}


# For the slurm_node and preflight roles (playbooks/filter_plugins/kiln_filters.py):
#   "{{ seen | kiln_identity_change(now) }}"   "{{ line | kiln_identity_words }}"
FILTERS = {"kiln_identity_change": identity_change, "kiln_identity_words": identity_words}
