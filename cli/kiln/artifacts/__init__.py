"""What a provision and a burn-in of an inventory fetch, and the bundle that brings it in.

    kiln.artifacts.plan.mirror_plan(cluster)   # every artifact, derived from the roles
    kiln.artifacts.fetch.fetch_bundle(plan, dir)  # downloaded and checked into a bundle
    kiln.artifacts.serve.mirror_server(dir, ...)  # the bundle over HTTP, with an access log

Nothing is imported here: the mirror host runs `python3 -m kiln.artifacts.serve` with the
standard library alone (serve, fetch, apt and kiln.mirror need nothing else).
"""
