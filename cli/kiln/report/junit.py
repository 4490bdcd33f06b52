"""JUnit XML for pipelines: a test case per node and check, failures with their message.

The shape CI systems read (Jenkins, GitLab, GitHub test reporters): <testsuites> holding one
<testsuite> per node (plus one named "fabric" for jobs, links and the fabric as a whole), each
<testcase classname="burnin.<node>" name="<check>"> with a <failure message type> when it
failed. Failing GPUs are listed in the body of their node's failure for the same check. A run
without InfiniBand has one skipped case, "infiniband", saying so.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

from kiln.judging.model import BurninReport
from kiln.judging.verdicts import Verdict, num
from kiln.report.text import xml_text


def _details(verdict: Verdict, gpus: list[Verdict]) -> str:
    lines = [verdict.message]
    if verdict.measured is not None or verdict.threshold is not None:
        lines.append(
            f"measured {num(verdict.measured)} {verdict.unit}, threshold "
            f"{num(verdict.threshold)} {verdict.unit}".replace("  ", " ")
        )
    if verdict.rule:
        lines.append(f"rule: {verdict.rule}")
    lines.append(f"severity {verdict.severity}, action {verdict.action}")
    lines += [f"{g.name}: {g.message}" for g in gpus]
    return "\n".join(lines)


def _sanitise(root: ET.Element) -> None:
    """Every text and attribute made well-formed XML: a message may quote a node's output."""
    for element in root.iter():
        if element.text:
            element.text = xml_text(element.text)
        for key, value in element.attrib.items():
            element.set(key, xml_text(value))


def render_junit(report: BurninReport) -> str:
    gpu_details: dict[tuple[str | None, str], list[Verdict]] = {}
    suites: dict[str, list[Verdict]] = {}
    for v in report.verdicts:
        if v.subject == "gpu":
            gpu_details.setdefault((v.node, v.check), []).append(v)
        elif v.subject == "node":
            suites.setdefault(v.name, []).append(v)
        else:
            suites.setdefault("fabric", []).append(v)
    root = ET.Element("testsuites", name=f"kiln burn-in {report.cluster}")
    skip = report.ib.summary() if report.ib is not None and not report.ib.links else None
    if skip is not None:
        suites.setdefault("fabric", [])
    total = failed = skipped = 0
    for suite_name in sorted(suites):
        cases = sorted(suites[suite_name], key=lambda v: (v.check, v.name))
        bad = sum(not v.passed for v in cases)
        skips = int(suite_name == "fabric" and skip is not None)
        suite = ET.SubElement(
            root,
            "testsuite",
            name=suite_name,
            tests=str(len(cases) + skips),
            failures=str(bad),
            errors="0",
            skipped=str(skips),
            time="0",
        )
        if skips:
            case = ET.SubElement(
                suite, "testcase", classname="burnin.fabric", name="infiniband", time="0"
            )
            ET.SubElement(case, "skipped", message=skip)
        for v in cases:
            name = v.check if v.subject == "node" else f"{v.check} {v.name}"
            case = ET.SubElement(
                suite, "testcase", classname=f"burnin.{suite_name}", name=name, time="0"
            )
            if not v.passed:
                failure = ET.SubElement(case, "failure", message=v.message, type=str(v.severity))
                failure.text = _details(v, gpu_details.get((v.node, v.check), []))
        total += len(cases) + skips
        failed += bad
        skipped += skips
    root.set("tests", str(total))
    root.set("failures", str(failed))
    root.set("errors", "0")
    root.set("skipped", str(skipped))
    _sanitise(root)
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
