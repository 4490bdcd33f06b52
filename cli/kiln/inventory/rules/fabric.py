"""Rules about the InfiniBand settings: the opensm hosts, and the stored fabric capture that
`kiln_slurm.topology: fabric` renders topology.conf from (read once, by the context)."""

from __future__ import annotations

from kiln.inventory.capture import FabricCapture
from kiln.inventory.context import COMPUTE, InventoryContext
from kiln.inventory.findings import FindingCollector, Origin, suggest
from kiln.inventory.schema import IbSpec
from kiln.inventory.sources import IGNORED_EXTENSIONS
from kiln.parsers.ibnetdiscover import declared_guids, owner_of

CAPTURE_HINT = (
    "store the output of `ibnetdiscover` run on a node of the fabric there "
    "(a path relative to the inventory directory)"
)


def opensm_hosts_declare_hcas(ctx: InventoryContext, out: FindingCollector) -> None:
    """opensm binds to the declared rails' ports: each host must exist and declare HCAs."""
    ib, _ = ctx.cluster_value("kiln_ib", IbSpec())
    where = ctx.written_at("kiln_ib", "opensm_hosts")
    if ib is None or where is None:
        return
    seen: set[str] = set()
    for host in ib.opensm_hosts:
        if host in seen:
            out.error(f"kiln_ib.opensm_hosts lists '{host}' twice", origin=where, key="kiln_ib")
        seen.add(host)
        resolved = ctx.hosts.get(host)
        if resolved is None:
            out.error(
                f"kiln_ib.opensm_hosts names '{host}', which the inventory does not have",
                origin=where,
                key="kiln_ib",
                hint=suggest(host, ctx.hosts) or "list inventory hosts that declare HCAs",
            )
        elif not ctx.value(resolved, "kiln_ib_hcas", []):
            with_hcas = [n for n, h in ctx.hosts.items() if ctx.value(h, "kiln_ib_hcas", [])]
            out.error(
                f"kiln_ib.opensm_hosts names '{host}', which declares no HCAs "
                "(kiln_ib_hcas): opensm would have no port to manage",
                origin=where,
                key="kiln_ib",
                hint=f"set kiln_ib_hcas for {host}, or pick a host with HCAs"
                + (f" such as {with_hcas[0]}" if with_hcas else ""),
            )


# One warning per skipped line up to this many, then one for the rest.
SKIPPED_SHOWN = 5


def capture_is_ibnetdiscover_output(ctx: InventoryContext, out: FindingCollector) -> None:
    """The capture exists, reads, and parses (an error at its own offending line); lines it
    skipped (ibnetdiscover's stderr folded in, a shell prompt) are warnings at their own line;
    a capture with no switch gives no topology.conf and is an error."""
    capture = ctx.capture
    if capture is None:
        return
    if capture.unreadable is not None:
        out.error(
            f"kiln_slurm.ibnetdiscover_file {capture.name}: cannot read {capture.path} "
            f"({capture.unreadable})",
            origin=_where(ctx),
            key="kiln_slurm",
            hint=CAPTURE_HINT,
        )
    elif capture.parse_error is not None:
        error = capture.parse_error
        out.error(
            f"kiln_slurm.ibnetdiscover_file {capture.name} is not ibnetdiscover output: {error}",
            origin=Origin(capture.path, error.line_no or 0),
            key="kiln_slurm",
            hint="store the plain output of `ibnetdiscover` (its default format)",
        )
    else:
        _skipped_lines(capture, out)
        if capture.fabric is not None and not capture.fabric.switches():
            out.error(
                f"kiln_slurm.ibnetdiscover_file {capture.name} shows no switch: the node "
                "that ran ibnetdiscover saw only itself (port down or not cabled), so there "
                "is no topology.conf to write",
                origin=Origin(capture.path),
                key="kiln_slurm",
                hint="capture from a node whose InfiniBand port is Active (ibstat)",
            )


def _skipped_lines(capture: FabricCapture, out: FindingCollector) -> None:
    skipped = capture.fabric.skipped if capture.fabric is not None else []
    for line in skipped[:SKIPPED_SHOWN]:
        out.warning(
            f"kiln_slurm.ibnetdiscover_file {capture.name}: {line.describe()}",
            origin=Origin(capture.path, line.line_no),
            key="kiln_slurm",
            hint="the topology is read from the other lines; store ibnetdiscover's standard "
            "output alone (2>/dev/null) to leave such lines out",
        )
    if len(skipped) > SKIPPED_SHOWN:
        rest = skipped[SKIPPED_SHOWN:]
        out.warning(
            f"kiln_slurm.ibnetdiscover_file {capture.name}: {len(rest)} more line(s) skipped "
            f"(lines {rest[0].line_no}-{rest[-1].line_no})",
            origin=Origin(capture.path, rest[0].line_no),
            key="kiln_slurm",
        )


def capture_is_hidden_from_ansible(ctx: InventoryContext, out: FindingCollector) -> None:
    """Ansible reads every file of an inventory directory it does not skip by name."""
    capture = ctx.capture
    if capture is None or capture.fabric is None:
        return
    path = capture.path
    if path.is_relative_to(ctx.raw.root) and not path.name.endswith(IGNORED_EXTENSIONS):
        out.warning(
            f"Ansible reads every file in an inventory directory as an inventory source, "
            f"{capture.name} included",
            origin=_where(ctx),
            key="kiln_slurm",
            hint="name the capture *.txt (Ansible skips those), or keep it outside",
        )


def capture_holds_the_compute_nodes(ctx: InventoryContext, out: FindingCollector) -> None:
    """A node the capture lacks is left out of topology.conf; a capture with none of them is
    another fabric's. A CA is a host's as topology.conf places it (owner_of): the node or
    port GUID its kiln_ib_hcas declare, else its node description."""
    capture = ctx.capture
    if capture is None or capture.fabric is None:
        return
    compute = ctx.membership.get(COMPUTE, [])
    guids = declared_guids(
        (name, _hcas(ctx.value(host, "kiln_ib_hcas", []))) for name, host in ctx.hosts.items()
    )
    hosts = {host for ca in capture.fabric.cas() if (host := owner_of(ca, guids)[0])}
    missing = [n for n in compute if n not in hosts]
    if compute and len(missing) == len(compute):
        out.error(
            f"kiln_slurm.ibnetdiscover_file {capture.name} holds none of the compute nodes "
            f"({compute[0]}, ...): it is another fabric's capture, or the CAs' node "
            "descriptions are unset",
            origin=_where(ctx),
            key="kiln_slurm",
            hint="capture this cluster's fabric; rdma-ndd sets node descriptions to "
            "'<host> <hca>', or declare kiln_ib_hcas by node GUID",
        )
    elif missing:
        shown = ", ".join(missing[:5]) + (", ..." if len(missing) > 5 else "")
        out.warning(
            f"the fabric capture {capture.name} lacks {len(missing)} compute node(s): {shown}; "
            "topology.conf puts them under a switch of their own (kiln-not-in-fabric), apart "
            "from the fabric's",
            origin=_where(ctx),
            key="kiln_slurm",
            hint="recapture after fixing their cabling or node descriptions",
        )


def _hcas(value: object) -> list[str]:
    """kiln_ib_hcas as written; a value of the wrong type is another rule's finding."""
    return [h for h in value if isinstance(h, str)] if isinstance(value, (list, tuple)) else []


def _where(ctx: InventoryContext) -> Origin | None:
    """The ibnetdiscover_file line inside kiln_slurm."""
    return ctx.written_at("kiln_slurm", "ibnetdiscover_file")
