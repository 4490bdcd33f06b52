"""Where an artifact lives in a kiln mirror (layout: <root>/<host>/<path> of its source) and the
roles' kiln_mirrored filter that points every download there when kiln_mirror.url is set. Pure:
the inventory's offline rule, the filter shims and `kiln mirror` all read the one rule here."""
